"""The console's words in Portuguese and English (`[ui] language`). Templates call
`t("English text")`; Portuguese has an entry for every one of them and for each value a
page shows as a word (states, statuses, kinds, verdicts, roles): tests/unit/test_ui_labels.py
holds that. English is the key, so an English page needs no table."""

from __future__ import annotations

from collections.abc import Callable, Mapping

PORTUGUESE: Mapping[str, str] = {
    # Navigation and page titles.
    "Porteiro": "Porteiro", "Overview": "Visão geral", "Payments": "Pagamentos",
    "Payment": "Pagamento", "Events": "Eventos", "Event": "Evento",
    "Dead letters": "Falhas (DLQ)", "Destinations": "Destinos", "Destination": "Destino",
    "Reconciliation": "Conciliação", "Quarantine": "Quarentena", "Audit": "Auditoria",
    "Log in": "Entrar", "Log out": "Sair", "Admin token": "Token de administração",
    "Role": "Papel", "Problem": "Problema", "Times in": "Horários em",
    # Overview.
    "Backlog": "Fila", "oldest pending": "pendente mais antigo", "Dead": "Mortos",
    "Duplicate ratio": "Taxa de duplicados", "alert line": "linha de alerta",
    "Ack latency": "Latência de confirmação", "acks": "confirmações",
    "Past expiry": "Vencidos", "expected payments still open after their expiry":
    "pagamentos esperados ainda abertos após o vencimento",
    "Deliveries per minute": "Entregas por minuto", "last": "últimos", "peak": "pico",
    "No deliveries in this window.": "Nenhuma entrega neste período.",
    "No destinations configured.": "Nenhum destino configurado.",
    "No reports yet.": "Nenhum relatório ainda.", "Report": "Relatório",
    "Missing": "Faltando", "Divergent": "Divergentes", "Name": "Nome",
    # Payments.
    "Order number": "Número do pedido", "Gateway id": "Id no gateway", "Source": "Origem",
    "State": "Situação", "Amount": "Valor", "From": "De", "To": "Até",
    "anomalous only": "só anômalos", "anomalous": "anômalo", "Search": "Buscar",
    "Refunded": "Estornado", "First heard": "Primeira notícia", "Updated": "Atualizado",
    "No payment matches.": "Nenhum pagamento encontrado.", "any": "qualquer",
    "Anomalies": "Anomalias", "last event": "último evento",
    "No state yet: its events have not been applied.":
    "Ainda sem situação: seus eventos não foram aplicados.",
    "Timeline": "Linha do tempo", "Delivery received": "Entrega recebida", "event": "evento",
    "unparseable": "ilegível", "Duplicate delivery": "Entrega duplicada",
    "collapsed: applied once": "agrupada: aplicada uma só vez", "new": "novo",
    "handlers ran in this transaction": "handlers executados nesta transação",
    "Not applied": "Não aplicado", "attempts": "tentativas", "Forwarded to": "Encaminhado a",
    "delivered": "entregue", "Expected by the merchant": "Esperado pelo lojista",
    "expires": "vence", "Status read at the gateway": "Situação consultada no gateway",
    "reads": "consultas", "next": "próxima", "Nothing recorded.": "Nada registrado.",
    # Events.
    "Status": "Status", "Kind": "Tipo", "Filter": "Filtrar", "Received": "Recebido",
    "Duplicates": "Duplicados", "Last error": "Último erro", "select": "selecionar",
    "No event matches.": "Nenhum evento encontrado.", "Type": "Tipo no gateway",
    "De-duplication key": "Chave de deduplicação", "Occurred": "Ocorreu",
    "duplicates": "duplicados", "Attempts": "Tentativas", "Origin": "Origem do evento",
    "thin: enriched from the gateway's API": "fino: completado pela API do gateway",
    "Parse warnings": "Avisos de leitura", "Replay": "Reprocessar",
    "Replay this event?": "Reprocessar este evento?", "Deliveries": "Entregas",
    "Delivery": "Entrega", "Parse error": "Erro de leitura", "Headers": "Cabeçalhos",
    "credentials redacted": "credenciais ocultadas", "Body": "Corpo",
    "Body as received": "Corpo como recebido",
    "No delivery: this event came from reconciliation.":
    "Sem entrega: este evento veio da conciliação.",
    # Dead letters.
    "By reason": "Por motivo", "Reason": "Motivo", "Newest": "Mais recente",
    "The dead-letter queue is empty.": "A fila de falhas está vazia.",
    "Preview replay of the selected": "Simular reprocessamento dos selecionados",
    "Preview replay of every match": "Simular reprocessamento de todos os filtrados",
    "Preview replay of the whole queue": "Simular reprocessamento da fila inteira",
    "Dry run": "Simulação", "events would be replayed": "eventos seriam reprocessados",
    "Nothing has changed yet. Each row is what the ledger would do, against the payment as stored now.":  # noqa: E501
    "Nada mudou ainda. Cada linha é o que o livro-razão faria, contra o pagamento como está agora.",
    "Not dead, left alone": "Não estão mortos, ficaram como estão",
    "Unknown events": "Eventos desconhecidos", "Before": "Antes", "After": "Depois",
    "Verdict": "Veredito", "Nothing to replay.": "Nada a reprocessar.",
    "Replay these": "Reprocessar estes", "The first ones are listed": "Listados os primeiros",
    # Destinations.
    "Target": "Alvo", "Pending": "Pendentes", "Delivered": "Entregues", "Pause": "Pausar",
    "Resume": "Retomar", "Redrive dead rows": "Reenviar mortos",
    "Send every dead row again?": "Reenviar todas as linhas mortas?", "done": "feito",
    "Last answer": "Última resposta", "Created": "Criado", "No rows.": "Nenhuma linha.",
    # Reconciliation, quarantine, audit.
    "Reports of the reconciler's status reads (stale) and of audits of a window (porteiro reconcile).":  # noqa: E501
    "Relatórios das consultas de situação (pendentes antigos) e das auditorias de um período (porteiro reconcile).",  # noqa: E501
    "Window": "Período", "Ingested": "Incorporados",
    "Ingest the missing payments": "Incorporar os pagamentos faltantes",
    "Read this window at the gateway again and store what is missing?":
    "Consultar este período no gateway de novo e guardar o que falta?",
    "Requests refused at authentication (401). A burst of bad signatures from one source is the first sign of a rotated secret.":  # noqa: E501
    "Requisições recusadas na autenticação (401). Uma rajada de assinaturas inválidas de uma origem é o primeiro sinal de um segredo trocado.",  # noqa: E501
    "Requests": "Requisições", "No refused requests.": "Nenhuma requisição recusada.",
    "Most recent": "Mais recentes", "Detail": "Detalhe", "Peer": "Remetente",
    "Size": "Tamanho", "When": "Quando", "Token": "Token", "Action": "Ação",
    "Selection": "Seleção", "Affected": "Afetados", "Outcome": "Resultado",
    "No operator action yet.": "Nenhuma ação de operador ainda.",
    "Next page": "Próxima página",
    "No admin token is configured: set [admin] token or [admin.tokens.NAME] to use the console.":
    "Nenhum token de administração configurado: defina [admin] token ou [admin.tokens.NOME] para usar o console.",  # noqa: E501
    # Answers.
    "requeued": "reenfileirados", "ingested": "incorporados",
    "unknown event": "evento desconhecido", "unknown payment": "pagamento desconhecido",
    "no such destination": "destino inexistente", "no such report": "relatório inexistente",
    "not an audit report with a window": "não é um relatório de auditoria com período",
    "gateway read failed": "a consulta ao gateway falhou",
    "unknown token": "token desconhecido", "refused": "recusado",
    "the form expired: try again": "o formulário expirou: tente de novo",
    "log in again: the session has ended": "entre de novo: a sessão terminou",
    "cross-origin request refused": "requisição de outra origem recusada",
    "missing or wrong CSRF token": "token CSRF ausente ou errado",
    "this token's role is read": "o papel deste token é leitura",
    "form too large": "formulário grande demais", "store unavailable": "banco indisponível",
    # Values shown as words: payment states.
    "pending": "pendente", "authorized": "autorizado", "paid": "pago",
    "partially_refunded": "estornado em parte", "refunded": "estornado",
    "failed": "falhou", "canceled": "cancelado", "expired": "expirado",
    "disputed": "em disputa", "charged_back": "chargeback",
    # Event and outbox statuses.
    "processing": "processando", "retrying": "nova tentativa", "dead": "morto",
    "ignored": "ignorado", "delivering": "entregando",
    # Destination states and actions.
    "active": "ativo", "paused": "pausado", "disabled": "desativado",
    "circuit_open": "circuito aberto", "pause": "pausar", "resume": "retomar",
    "redrive": "reenviar",
    # Verdicts (and the dry run's own).
    "applied": "aplicado", "no_effect": "sem efeito", "duplicate": "duplicado",
    "stale": "atrasado", "needs enrichment": "precisa de consulta ao gateway",
    # Roles, audit outcomes, report kinds and categories.
    "read": "leitura", "operate": "operação", "ok": "ok", "forbidden": "proibido",
    "rejected": "rejeitado", "audit": "auditoria", "missing": "faltando",
    "divergent": "divergente", "unknown": "desconhecido",
    # Event kinds.
    "payment.created": "pagamento criado", "payment.authorized": "pagamento autorizado",
    "payment.paid": "pagamento pago", "payment.failed": "pagamento falhou",
    "payment.canceled": "pagamento cancelado", "payment.expired": "pagamento expirado",
    "payment.refunded": "pagamento estornado",
    "payment.partially_refunded": "pagamento estornado em parte",
    "payment.capture_failed": "captura falhou", "payment.refund_reversed": "estorno revertido",
    "payment.authorization_expired": "autorização expirada", "dispute.opened": "disputa aberta",
    "dispute.won": "disputa ganha", "dispute.lost": "disputa perdida", "other": "outro",
}  # fmt: skip


def labels(language: str) -> Callable[[str], str]:
    """`t(text)`: the text in `language` (English: as written)."""
    if language == "en":
        return _as_written
    table = PORTUGUESE

    def t(text: str) -> str:
        return table.get(text, text)

    return t


def _as_written(text: str) -> str:
    return text

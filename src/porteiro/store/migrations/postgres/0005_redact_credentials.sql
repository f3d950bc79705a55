-- Credentials out of what older versions stored verbatim (porteiro.redact does the same
-- to every request before it is stored now): the values of the Authorization,
-- Proxy-Authorization and Cookie headers, and of the `hmac` query parameter (Efí's Pix
-- token), in deliveries and the quarantine. Authorization keeps a registered scheme word
-- ("Basic [redacted]"); names, order and every other header and parameter stay as they
-- were, and bodies are not touched. A source's own `secret_headers` / `secret_params` are
-- not known here: docs/operations.md says how to scrub those. Parameter names match
-- literally (case aside).

UPDATE deliveries SET query = regexp_replace(query, '(^|&)(hmac)=[^&]+', '\1\2=[redacted]', 'gi')
WHERE query ~* '(^|&)hmac=[^&]';

UPDATE deliveries SET headers = (
    SELECT coalesce(jsonb_agg(CASE
        WHEN lower(h ->> 0) NOT IN ('authorization', 'proxy-authorization', 'cookie') OR v = ''
             THEN h
        WHEN lower(h ->> 0) <> 'cookie' AND position(' ' IN v) > 0
             AND lower(split_part(v, ' ', 1))
                 IN ('basic', 'bearer', 'digest', 'token', 'negotiate', 'ntlm', 'hoba')
             THEN jsonb_build_array(h ->> 0, split_part(v, ' ', 1) || ' [redacted]')
        ELSE jsonb_build_array(h ->> 0, '[redacted]') END ORDER BY i), '[]'::jsonb)
    FROM jsonb_array_elements(deliveries.headers) WITH ORDINALITY AS e(h, i),
         LATERAL (SELECT btrim(h ->> 1, E' \t') AS v) AS trimmed
)
WHERE EXISTS (
    SELECT 1 FROM jsonb_array_elements(headers) AS h
    WHERE lower(h ->> 0) IN ('authorization', 'proxy-authorization', 'cookie')
);

UPDATE quarantine SET headers = (
    SELECT coalesce(jsonb_agg(CASE
        WHEN lower(h ->> 0) NOT IN ('authorization', 'proxy-authorization', 'cookie') OR v = ''
             THEN h
        WHEN lower(h ->> 0) <> 'cookie' AND position(' ' IN v) > 0
             AND lower(split_part(v, ' ', 1))
                 IN ('basic', 'bearer', 'digest', 'token', 'negotiate', 'ntlm', 'hoba')
             THEN jsonb_build_array(h ->> 0, split_part(v, ' ', 1) || ' [redacted]')
        ELSE jsonb_build_array(h ->> 0, '[redacted]') END ORDER BY i), '[]'::jsonb)
    FROM jsonb_array_elements(quarantine.headers) WITH ORDINALITY AS e(h, i),
         LATERAL (SELECT btrim(h ->> 1, E' \t') AS v) AS trimmed
)
WHERE EXISTS (
    SELECT 1 FROM jsonb_array_elements(headers) AS h
    WHERE lower(h ->> 0) IN ('authorization', 'proxy-authorization', 'cookie')
);

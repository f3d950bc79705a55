"""Merchant delivery: the transactional outbox and the relays that drain it.

fanout.py (pure) turns one applied event into outbox rows, under the id message_id.py
(pure) gives it; relay.py is the shared claim / retry / circuit-breaker / rate loop;
http_relay.py and rabbitmq_relay.py are the two transports. See docs/destinations.md.
"""

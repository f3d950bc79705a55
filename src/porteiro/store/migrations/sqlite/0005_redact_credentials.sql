-- Credentials out of what older versions stored verbatim (porteiro.redact does the same
-- to every request before it is stored now): the values of the Authorization,
-- Proxy-Authorization and Cookie headers, and of the `hmac` query parameter (Efí's Pix
-- token), in deliveries and the quarantine. Authorization keeps a registered scheme word
-- ("Basic [redacted]"); names, order and every other header and parameter stay as they
-- were, and bodies are not touched. A source's own `secret_headers` / `secret_params` are
-- not known here: docs/operations.md says how to scrub those. SQLite has no regex, so
-- the query is split on '&' with a recursive CTE; parameter names match literally.

UPDATE deliveries SET query = (
    WITH RECURSIVE pieces(n, piece, rest) AS (
        SELECT 0, NULL, deliveries.query || '&'
        UNION ALL
        SELECT n + 1, substr(rest, 1, instr(rest, '&') - 1), substr(rest, instr(rest, '&') + 1)
        FROM pieces WHERE rest <> ''
    )
    SELECT group_concat(
        CASE WHEN lower(substr(piece, 1, 5)) = 'hmac=' AND length(piece) > 5
             THEN substr(piece, 1, 4) || '=[redacted]' ELSE piece END, '&')
    FROM (SELECT piece FROM pieces WHERE n > 0 ORDER BY n)
)
WHERE '&' || query LIKE '%&hmac=_%';

UPDATE deliveries SET headers = (
    SELECT json_group_array(json_array(name, CASE
        WHEN lower(name) NOT IN ('authorization', 'proxy-authorization', 'cookie') OR v = ''
             THEN value
        WHEN lower(name) <> 'cookie' AND instr(v, ' ') > 0
             AND lower(substr(v, 1, instr(v, ' ') - 1))
                 IN ('basic', 'bearer', 'digest', 'token', 'negotiate', 'ntlm', 'hoba')
             THEN substr(v, 1, instr(v, ' ') - 1) || ' [redacted]'
        ELSE '[redacted]' END))
    FROM (SELECT json_extract(h.value, '$[0]') AS name, json_extract(h.value, '$[1]') AS value,
                 trim(json_extract(h.value, '$[1]'), ' ' || char(9)) AS v
          FROM json_each(deliveries.headers) AS h ORDER BY h.key)
)
WHERE EXISTS (
    SELECT 1 FROM json_each(deliveries.headers) AS h
    WHERE lower(json_extract(h.value, '$[0]')) IN ('authorization', 'proxy-authorization', 'cookie')
);

UPDATE quarantine SET headers = (
    SELECT json_group_array(json_array(name, CASE
        WHEN lower(name) NOT IN ('authorization', 'proxy-authorization', 'cookie') OR v = ''
             THEN value
        WHEN lower(name) <> 'cookie' AND instr(v, ' ') > 0
             AND lower(substr(v, 1, instr(v, ' ') - 1))
                 IN ('basic', 'bearer', 'digest', 'token', 'negotiate', 'ntlm', 'hoba')
             THEN substr(v, 1, instr(v, ' ') - 1) || ' [redacted]'
        ELSE '[redacted]' END))
    FROM (SELECT json_extract(h.value, '$[0]') AS name, json_extract(h.value, '$[1]') AS value,
                 trim(json_extract(h.value, '$[1]'), ' ' || char(9)) AS v
          FROM json_each(quarantine.headers) AS h ORDER BY h.key)
)
WHERE EXISTS (
    SELECT 1 FROM json_each(quarantine.headers) AS h
    WHERE lower(json_extract(h.value, '$[0]')) IN ('authorization', 'proxy-authorization', 'cookie')
);

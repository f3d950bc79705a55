"""A tiny merchant: an `orders` table that Porteiro's in-process handlers keep in step
with payments (docs/handlers.md). Put `examples/` on `sys.path` and configure
`[handlers] module = "shop.payments"`."""

"""The web server: granian (edge.serve) serving one ASGI application (config/asgi.py), a
prefix table (edge.dispatch) in front of the fast lane, /mcp and Django (edge.django_lane),
with the event-loop watchdog (edge.watchdog). No domain code: the lanes call services."""

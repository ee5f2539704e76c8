import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

from config import telemetry  # noqa: E402

telemetry.setup()  # traces, when OTEL_* asks (config.telemetry)
application = get_wsgi_application()

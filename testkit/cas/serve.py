"""`python -m testkit.cas.serve FD`: the loopback CAS server on the listening socket FD (inherited),
after migrating its SQLite database and registering the services it issues tickets for."""

import os
import sys

import django

# The services the server knows: the gateway on any loopback port (and any path of it: a second
# path stands for "another service" in the tests), and the public name the proxy tests use.
SERVICE_PATTERN = r"^(http://127\.0\.0\.1:\d+|https://xiaozhi\.example\.edu\.cn)/"


def main(fd: int) -> None:
    os.environ["DJANGO_SETTINGS_MODULE"] = "testkit.cas.settings"
    django.setup()
    from cas_server.models import ReplaceAttributName, ServicePattern
    from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler
    from django.core.asgi import get_asgi_application
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    service, _ = ServicePattern.objects.get_or_create(
        pattern=SERVICE_PATTERN, defaults={"name": "campus-agent", "single_log_out": True}
    )
    ReplaceAttributName.objects.get_or_create(name="*", service_pattern=service)  # every attribute released

    import uvicorn

    uvicorn.run(ASGIStaticFilesHandler(get_asgi_application()), fd=fd, log_level="warning", lifespan="off")


if __name__ == "__main__":
    main(int(sys.argv[1]))

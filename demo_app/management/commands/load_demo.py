"""`manage.py load_demo`: registers the demo catalog (demo_app/catalog.py) and the demo logins."""
from django.conf import settings
from django.core.management.base import BaseCommand

from demo_app.catalog import DEMO_DISABLED_WARNING, demo_catalog_load, demo_logins_allowed, demo_sub_agents_unserved


class Command(BaseCommand):
    help = "注册演示目录（演示子 Agent、演示 MCP 服务、默认智能体“校园小智”和本机试用账号）；重复运行不会改动已有数据。"

    def add_arguments(self, parser):
        users = parser.add_mutually_exclusive_group()
        users.add_argument("--no-users", action="store_true", help="不创建演示登录账号。")
        users.add_argument(
            "--force-users",
            action="store_true",
            help="即使 DEBUG 关闭且 ALLOWED_HOSTS 含外部域名，也创建默认密码的演示账号（请勿用于生产）。",
        )

    def handle(self, *args, no_users: bool, force_users: bool, **options):
        with_logins = not no_users and (force_users or demo_logins_allowed())
        report = demo_catalog_load(base_url=settings.DEMO_BASE_URL, with_logins=with_logins)
        for label in report.created:
            self.stdout.write(f"已创建 {label}")
        for label in report.moved:
            self.stdout.write(self.style.SUCCESS(f"已更新{label}（演示目录跟随本次运行）"))
        for label in report.kept:
            self.stdout.write(f"已存在，未改动 {label}")
        if demo_sub_agents_unserved(base_url=settings.DEMO_BASE_URL):
            self.stdout.write(self.style.WARNING(DEMO_DISABLED_WARNING))
        if report.logins:
            self.stdout.write(self.style.SUCCESS("本机试用账号（仅供本机演示，部署前请删除或改密码）："))
            for login, created in report.logins:
                state = "" if created else "（账号已存在，密码未改动）"
                self.stdout.write(f"  {login.label}：{login.username} / {login.password}{state}")
        elif not no_users:
            self.stdout.write(
                self.style.WARNING(
                    "DEBUG 关闭且 ALLOWED_HOSTS 含外部域名：未创建默认密码的演示账号。"
                    "请用 manage.py createsuperuser 创建账号，或加 --force-users。"
                )
            )

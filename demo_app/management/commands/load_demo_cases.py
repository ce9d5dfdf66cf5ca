"""`manage.py load_demo_cases`: the demo catalog's routing cases (after load_demo)."""
from django.core.management.base import BaseCommand

from demo_app.routing_cases import DEMO_AGENT_SLUG, demo_cases_load


class Command(BaseCommand):
    help = "为演示智能体“校园小智”登记演示路由用例（先运行 load_demo）；重复运行不会改动已有用例。"

    def handle(self, *args, **options):
        created, kept = demo_cases_load()
        if not created and not kept:
            self.stdout.write(self.style.WARNING(f"没有标识为“{DEMO_AGENT_SLUG}”的智能体：请先运行 load_demo。"))
            return
        self.stdout.write(f"演示路由用例：新建 {created} 个，已存在 {kept} 个。")

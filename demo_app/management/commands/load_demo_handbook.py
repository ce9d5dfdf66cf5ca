"""`manage.py load_demo_handbook`: the demo's knowledge base (demo_app/handbook.py)."""
from django.core.management.base import BaseCommand

from demo_app.catalog import AGENT_SLUG
from demo_app.handbook import HANDBOOK_NAME, demo_handbook_load


class Command(BaseCommand):
    help = "注册演示知识库“学生手册（示例）”并索引它的文件（关联到演示智能体）；重复运行不会改动已有数据。"

    def handle(self, *args, **options):
        report = demo_handbook_load(agent_slug=AGENT_SLUG)
        state = "已创建" if report.collection_created else "已存在"
        self.stdout.write(f"{state} 知识库 {HANDBOOK_NAME}：新加入 {len(report.added)} 个文件，"
                          f"已有 {len(report.kept)} 个，本次索引 {report.indexed} 个")

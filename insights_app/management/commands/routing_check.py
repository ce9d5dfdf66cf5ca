"""`manage.py routing_check`: replay the routing cases, store the checks, exit 1 on a regression."""
from django.core.management.base import BaseCommand, CommandError

from agents_app.models import Agent
from insights_app.models import RoutingCase, RoutingCheck
from insights_app.routing.ask import KEYWORD, MODEL, RoutingUnavailable
from insights_app.routing.checks import CheckSettings, routing_check_run
from insights_app.routing.junit import junit_write
from insights_app.routing.replay import passes_needed

REGRESSION_EXIT = 1


class Command(BaseCommand):
    help = (
        "重放路由用例：用智能体当前的提示词、工具和模型（和聊天一样：后台选的模型提供方，否则环境变量 LLM_*；"
        "都没有时用关键词路由）判断第一轮的工具选择，"
        "不执行任何工具。结果保存在后台“路由检查”中；有用例从通过变为失败（新失败）时退出码为 1。"
    )

    def add_arguments(self, parser):
        parser.add_argument("--agent", metavar="SLUG", help="只检查这个智能体（默认：所有有启用用例的智能体）。")
        parser.add_argument("--repeat", type=int, metavar="N", help="每个用例运行几次（默认 ROUTING_CHECK_REPEAT=3）。")
        parser.add_argument("--pass-rate", type=float, metavar="R",
                            help="用例通过所需的选对比例，0–1（默认 ROUTING_CHECK_PASS_RATE=0.66，即 3 次中 2 次）。")
        parser.add_argument("--mode", choices=[MODEL, KEYWORD],
                            help="model：问模型；keyword：关键词路由。默认：和聊天一样，智能体有可用的模型"
                                 "（后台选的模型提供方，或环境变量 LLM_*）就问模型，否则用关键词路由。")
        parser.add_argument("--junit", metavar="FILE", help="另写一份 JUnit XML 报告（CI 显示测试结果用）。")
        parser.add_argument("--strict", action="store_true", help="任何用例失败（不只是新失败）都以退出码 1 结束。")

    def handle(self, *args, agent=None, repeat=None, pass_rate=None, mode=None, junit=None, strict=False, **options):
        if repeat is not None and repeat < 1:
            raise CommandError("--repeat 至少为 1。")
        if pass_rate is not None and not 0 <= pass_rate <= 1:
            raise CommandError("--pass-rate 应在 0 到 1 之间。")
        knobs = CheckSettings.resolve(repeat=repeat, pass_rate=pass_rate, mode=mode)
        agents = Agent.objects.filter(pk__in=RoutingCase.objects.filter(enabled=True).values("agent")).order_by("slug")
        if agent:
            agents = Agent.objects.filter(slug=agent)
            if not agents.exists():
                raise CommandError(f"没有标识为“{agent}”的智能体。")
        checks: list[RoutingCheck] = []
        for each in agents:
            try:
                check = routing_check_run(agent=each, knobs=knobs, trigger=RoutingCheck.Trigger.COMMAND)
            except RoutingUnavailable as exc:  # --mode model for an agent with no model
                raise CommandError(str(exc)) from exc
            if check is None:
                self.stdout.write(f"{each.slug}：没有启用的路由用例。")
                continue
            checks.append(check)
            self._report(check)
        if junit:
            junit_write(checks=checks, path=junit)
            self.stdout.write(f"JUnit 报告已写入 {junit}")
        if not checks:
            self.stdout.write("没有可检查的路由用例。")
            return
        regressed = sum(check.regressed for check in checks)
        failed = sum(check.total - check.passed for check in checks)
        if regressed:
            raise CommandError(f"{regressed} 个用例新失败（上一次检查通过）。", returncode=REGRESSION_EXIT)
        if strict and failed:
            raise CommandError(f"{failed} 个用例失败。", returncode=REGRESSION_EXIT)

    def _report(self, check: RoutingCheck) -> None:
        router = f"模型 {check.model}" if check.mode == MODEL else "关键词路由"
        needed = passes_needed(repeat=check.repeat, pass_rate=check.pass_rate)
        self.stdout.write(
            f"{check.agent.slug}（{router}，目录指纹 {check.fingerprint}，每个用例 {check.repeat} 次中"
            f"至少 {needed} 次选对才算通过）"
        )
        for problem in check.problems:
            self.stdout.write(self.style.WARNING(f"  工具缺失：{problem}"))
        for outcome in check.outcomes.all().order_by("id"):
            mark = self.style.SUCCESS("通过") if outcome.passed else self.style.ERROR("失败")
            change = outcome.get_change_display()
            self.stdout.write(f"  [{mark}] {outcome.passes}/{outcome.runs} {change}  {outcome.question[:60]}")
            if not outcome.passed:
                for failure in sorted({f for run in outcome.detail for f in run.get("failures", [])}):
                    self.stdout.write(f"         - {failure}")
        summary = f"  共 {check.total} 个，通过 {check.passed}，新失败 {check.regressed}，新通过 {check.fixed}"
        self.stdout.write(self.style.ERROR(summary) if check.regressed else summary)

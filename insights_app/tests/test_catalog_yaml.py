"""The whole catalog as YAML (issue 25 point 3): `export_catalog` / `import_catalog`."""
import time
from io import StringIO

import pytest
import yaml
from django.core.management import CommandError, call_command

from agents_app.models import Agent, McpService
from insights_app.catalog.fileformat import MAX_FILE_BYTES, CatalogError
from insights_app.catalog.service import NOTHING_TO_CHANGE, catalog_export, catalog_import
from insights_app.models import RoutingArgExpectation, RoutingCase
from subagents_app.models import SubAgent

SECRET = "s3cret"
TIMESTAMPS = ("id", "created_at", "updated_at")


def run(command: str, *args) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command(command, *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def write(tmp_path, text: str, name: str = "catalog.yaml") -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def _rows(model, *, keep_ids: bool) -> list[dict]:
    rows = list(model.objects.order_by("id").values())
    return rows if keep_ids else [{k: v for k, v in row.items() if k not in TIMESTAMPS} for row in rows]


def catalog_state(*, keep_ids: bool = False) -> dict:
    """Every catalog row field by field, links by natural key. With `keep_ids`, ids and timestamps
    too: "changes nothing" means all of it."""
    agents = _rows(Agent, keep_ids=keep_ids)
    for row, agent in zip(agents, Agent.objects.order_by("id"), strict=True):
        row["mcp_services"] = sorted(agent.mcp_services.values_list("name", flat=True))
        row["sub_agents"] = sorted(agent.sub_agents.values_list("name", flat=True))
    cases = _rows(RoutingCase, keep_ids=keep_ids)
    for row, case in zip(cases, RoutingCase.objects.order_by("id"), strict=True):
        row["agent_id"] = case.agent.slug
        row["arg_expectations"] = [
            {k: v for k, v in e.items() if keep_ids or k not in ("id", "case_id")}
            for e in RoutingArgExpectation.objects.filter(case=case).order_by("id").values()
        ]
    return {
        "mcp_services": _rows(McpService, keep_ids=keep_ids),
        "sub_agents": _rows(SubAgent, keep_ids=keep_ids),
        "agents": agents,
        "routing_cases": cases,
    }


def catalog_empty() -> None:
    RoutingCase.objects.all().delete()
    Agent.objects.all().delete()
    McpService.objects.all().delete()
    SubAgent.objects.all().delete()


@pytest.fixture
def demo_catalog(db):
    run("load_demo", "--no-users")
    run("load_demo_cases")
    assert RoutingCase.objects.count() >= 5 and RoutingArgExpectation.objects.exists()


@pytest.fixture
def demo_file(demo_catalog, tmp_path) -> str:
    text, _ = run("export_catalog")
    return write(tmp_path, text)


@pytest.fixture
def secret_services(db):
    http = McpService.objects.create(
        name="canvas", protocol="streamable-http",
        config={"url": f"https://mcp.example.edu.cn/mcp?tenant=campus&access_token={SECRET}",
                "headers": {"Authorization": f"Bearer {SECRET}", "X-Tenant": "campus"},
                "oauth": {"client_id": "campus-agent", "client_secret": SECRET}},
    )
    stdio = McpService.objects.create(
        name="grades", protocol="stdio",
        config={"command": "/usr/bin/grades-mcp", "args": ["--readonly"],
                "env": {"API_KEY": SECRET, "LANG": "zh_CN.UTF-8"}},
    )
    return http, stdio


# --- round trips ----------------------------------------------------------------------------


def test_demo_catalog_exported_and_imported_into_an_empty_database_is_the_same_catalog(demo_file):
    before = catalog_state()
    exported = open(demo_file, encoding="utf-8").read()
    assert exported.startswith("catalog: 1\n")
    catalog_empty()

    out, _ = run("import_catalog", demo_file)

    assert "新建 智能体 xiaozhi" in out and "新建 路由用例 xiaozhi · 你好" in out
    assert catalog_state() == before
    assert catalog_export().text == exported  # and it exports the same file again


def test_importing_the_same_file_twice_changes_nothing_the_second_time(demo_file):
    catalog_empty()
    run("import_catalog", demo_file)
    after_first = catalog_state(keep_ids=True)

    out, _ = run("import_catalog", demo_file)

    assert NOTHING_TO_CHANGE in out and "新建" not in out and "更新" not in out
    assert catalog_state(keep_ids=True) == after_first  # timestamps and arg-expectation ids too


def test_importing_its_own_export_changes_nothing(demo_file):
    before = catalog_state(keep_ids=True)
    out, _ = run("import_catalog", demo_file)
    assert out.strip().endswith(f"{NOTHING_TO_CHANGE}（10 个对象均未变）")
    assert catalog_state(keep_ids=True) == before


def _edited(path: str) -> dict:
    data = yaml.safe_load(open(path, encoding="utf-8").read())
    agent = data["agents"][0]
    agent.update(name="小智", temperature=0.3, sub_agents=["canteen", "course"])
    data["sub_agents"].append({"name": "dorm", "description": "宿舍助手：报修、水电费。关键词：宿舍、报修",
                               "base_url": "http://dorm-agent:8000"})
    data["routing_cases"][0]["arg_expectations"][0]["contains"] = "食堂"
    return data


def test_dry_run_prints_the_diff_field_by_field_and_changes_nothing(demo_file, tmp_path):
    before = catalog_state(keep_ids=True)
    path = write(tmp_path, yaml.safe_dump(_edited(demo_file), allow_unicode=True), "edited.yaml")

    out, _ = run("import_catalog", path, "--dry-run")

    lines = out.splitlines()
    assert "将新建 子 Agent dorm" in lines
    assert "将更新 智能体 xiaozhi：" in lines
    assert "  name: '校园小智' → '小智'" in lines
    assert "  temperature: 0.7 → 0.3" in lines
    assert "  sub_agents: [canteen, course, library] → [canteen, course]" in lines
    assert "  arg_expectations: call_canteen.message ⊇ 二食堂 → call_canteen.message ⊇ 食堂" in lines
    assert "未变 MCP 服务 campus-calendar" in lines and "未变 子 Agent library" in lines
    assert "试运行（--dry-run）：未做任何修改" in lines
    assert lines[-1].startswith("新建 1 个，更新 2 个，未变 ") and "导入从不删除" in lines[-1]
    assert catalog_state(keep_ids=True) == before

    run("import_catalog", path)  # and without --dry-run it does what the diff said
    agent = Agent.objects.get(slug="xiaozhi")
    assert (agent.name, agent.temperature) == ("小智", 0.3)
    assert sorted(agent.sub_agents.values_list("name", flat=True)) == ["canteen", "course"]
    assert SubAgent.objects.filter(name="library").exists()  # unlinked, not deleted


def test_import_never_deletes_what_the_file_does_not_name(demo_catalog, tmp_path):
    before = catalog_state(keep_ids=True)
    out, _ = run("import_catalog", write(tmp_path, "catalog: 1\nsub_agents: []\n"))
    assert NOTHING_TO_CHANGE in out
    assert catalog_state(keep_ids=True) == before


def test_the_default_agent_moves_within_one_file(demo_catalog, tmp_path):
    data = yaml.safe_load(catalog_export().text)
    data["agents"][0]["is_default"] = False
    data["agents"].insert(0, {"slug": "freshman", "name": "新生助手", "is_default": True, "sub_agents": ["canteen"]})
    run("import_catalog", write(tmp_path, yaml.safe_dump(data, allow_unicode=True)))
    assert list(Agent.objects.filter(is_default=True).values_list("slug", flat=True)) == ["freshman"]


# --- secrets --------------------------------------------------------------------------------


def test_secrets_never_reach_the_export_they_become_references_with_a_warning(secret_services, tmp_path):
    out, err = run("export_catalog")
    path = tmp_path / "out.yaml"
    file_out, file_err = run("export_catalog", str(path))

    for text in (out, err, path.read_text(encoding="utf-8"), file_out, file_err):
        assert SECRET not in text
    services = {s["name"]: s["config"] for s in yaml.safe_load(out)["mcp_services"]}
    assert services["canvas"]["headers"] == {"Authorization": "Bearer ${ENV:MCP_CANVAS_AUTHORIZATION}",
                                             "X-Tenant": "campus"}
    assert services["canvas"]["url"] == (
        "https://mcp.example.edu.cn/mcp?tenant=campus&access_token=${ENV:MCP_CANVAS_URL_ACCESS_TOKEN}"
    )
    assert services["canvas"]["oauth"] == {"client_id": "campus-agent",  # a pre-registered client's secret
                                           "client_secret": "${ENV:MCP_CANVAS_CLIENT_SECRET}"}
    assert services["grades"]["env"] == {"API_KEY": "${ENV:MCP_GRADES_API_KEY}", "LANG": "zh_CN.UTF-8"}
    for variable in ("MCP_CANVAS_AUTHORIZATION", "MCP_CANVAS_URL_ACCESS_TOKEN", "MCP_CANVAS_CLIENT_SECRET",
                     "MCP_GRADES_API_KEY"):
        assert variable in err
    assert len(err.strip().splitlines()) == 4


def test_a_reference_is_resolved_from_the_environment_at_import_time(secret_services, tmp_path, monkeypatch):
    path = write(tmp_path, catalog_export().text)
    stored = {s.name: s.config for s in McpService.objects.all()}
    McpService.objects.all().delete()
    monkeypatch.setenv("MCP_CANVAS_AUTHORIZATION", SECRET)
    monkeypatch.setenv("MCP_CANVAS_URL_ACCESS_TOKEN", SECRET)
    monkeypatch.setenv("MCP_CANVAS_CLIENT_SECRET", SECRET)
    monkeypatch.setenv("MCP_GRADES_API_KEY", SECRET)

    run("import_catalog", path)

    assert {s.name: s.config for s in McpService.objects.all()} == stored  # the values, not references
    out, _ = run("import_catalog", path)
    assert NOTHING_TO_CHANGE in out

    monkeypatch.setenv("MCP_GRADES_API_KEY", "rotated-" + SECRET)  # a changed secret: shown, not printed
    out, err = run("import_catalog", path, "--dry-run")
    assert "  config.env.API_KEY: 已修改（密钥，值不显示）" in out.splitlines()
    assert SECRET not in out + err


def test_a_reference_to_an_unset_variable_is_an_error_and_nothing_is_imported(secret_services, tmp_path, monkeypatch):
    path = write(tmp_path, catalog_export().text)
    McpService.objects.all().delete()
    monkeypatch.delenv("MCP_GRADES_API_KEY", raising=False)
    monkeypatch.setenv("MCP_CANVAS_AUTHORIZATION", SECRET)
    monkeypatch.setenv("MCP_CANVAS_URL_ACCESS_TOKEN", SECRET)
    monkeypatch.setenv("MCP_CANVAS_CLIENT_SECRET", SECRET)

    with pytest.raises(CommandError) as caught:
        run("import_catalog", path)

    assert ("mcp_services 第 2 条（grades）: config.env.API_KEY: 环境变量 MCP_GRADES_API_KEY 未设置"
            "（文件里写的是 ${ENV:MCP_GRADES_API_KEY}）") in str(caught.value).splitlines()
    assert not McpService.objects.exists()


def test_each_stdio_service_created_or_changed_is_warned_of(demo_catalog, tmp_path):
    data = yaml.safe_load(catalog_export().text)
    _, err = run("import_catalog", write(tmp_path, yaml.safe_dump(data, allow_unicode=True)))
    assert err == ""  # unchanged: no warning
    data["mcp_services"][0]["timeout_sec"] = 25
    data["mcp_services"].append(
        {"name": "shell", "protocol": "stdio", "config": {"command": "/bin/sh", "args": ["-c", "id"]}}
    )
    _, err = run("import_catalog", write(tmp_path, yaml.safe_dump(data, allow_unicode=True)), "--dry-run")
    lines = err.splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("警告：stdio MCP 服务 campus-calendar 将在本服务器上运行 ")
    assert lines[1] == "警告：stdio MCP 服务 shell 将在本服务器上运行 /bin/sh -c id（以服务器的用户身份）"


# --- hostile files --------------------------------------------------------------------------


def refused(tmp_path, text: str) -> list[str]:
    """The problem lines of a file import refuses, having changed nothing."""
    before = catalog_state(keep_ids=True)
    with pytest.raises(CommandError) as caught:
        run("import_catalog", write(tmp_path, text))
    assert catalog_state(keep_ids=True) == before
    head, *lines = str(caught.value).splitlines()
    assert head.endswith("未做任何修改，原因：")
    return lines


@pytest.mark.django_db
def test_a_yaml_syntax_error_is_named_with_its_line(tmp_path):
    lines = refused(tmp_path, "catalog: 1\nagents:\n  - slug: [unclosed\n")
    assert len(lines) == 1 and lines[0].startswith("YAML 错误（第 4 行")


@pytest.mark.django_db
@pytest.mark.parametrize(("text", "expected"), [
    ("- slug: x\n", "顶层: 文件须是一个映射"),
    ("agents: []\n", "顶层: catalog: 须是 1（文件格式版本），实际是 None"),
    ("catalog: 2\n", "顶层: catalog: 须是 1（文件格式版本），实际是 2"),
    ("catalog: true\n", "顶层: catalog: 须是 1（文件格式版本），实际是 True"),
    ("catalog: 1.0\n", "顶层: catalog: 须是 1（文件格式版本），实际是 1.0"),
    ("", "顶层: 文件须是一个映射"),
    ("catalog: 1\nproviders: []\n", "顶层: 未知的顶层键：providers"),
    ("catalog: 1\nagents: {slug: x}\n", "顶层: agents: 须是列表，而不是 dict"),
    ("catalog: 1\nagents: [xiaozhi]\n", "agents 第 1 条（?）: 条目须是映射，而不是 str"),
])
def test_a_wrong_top_level_is_refused(tmp_path, text, expected):
    assert refused(tmp_path, text)[0].startswith(expected)


@pytest.mark.django_db
def test_unknown_keys_and_wrong_types_are_each_named(tmp_path):
    lines = refused(tmp_path, """catalog: 1
sub_agents:
  - name: canteen
    description: 食堂
    base_url: http://canteen:8000
    timeout_sec: "30"
    enabled: "yes"
    colour: red
agents:
  - slug: xiaozhi
    temperature: true
    sub_agents: canteen
    max_tool_rounds: 5.5
""")
    assert lines == [
        "sub_agents 第 1 条（canteen）: colour: 未知字段，可用字段：name, description, base_url, domain, timeout_sec, "
        "enabled, protocol, approval_policy, display_name, example_questions, allowed_groups",
        "sub_agents 第 1 条（canteen）: timeout_sec: 类型错误，应为整数，实际是 '30'",
        "sub_agents 第 1 条（canteen）: enabled: 类型错误，应为true 或 false，实际是 'yes'",
        "agents 第 1 条（xiaozhi）: name: 缺少必填字段",
        "agents 第 1 条（xiaozhi）: temperature: 类型错误，应为数字，实际是 True",
        "agents 第 1 条（xiaozhi）: max_tool_rounds: 类型错误，应为整数，实际是 5.5",
        "agents 第 1 条（xiaozhi）: sub_agents: 类型错误，应为列表，实际是 'canteen'",
    ]


@pytest.mark.django_db
def test_a_file_over_the_cap_is_refused_unread(tmp_path):
    path = tmp_path / "big.yaml"
    path.write_text("catalog: 1\n# " + "x" * (10 * 1024 * 1024) + "\n", encoding="utf-8")
    started = time.monotonic()
    with pytest.raises(CommandError, match=f"文件超过 {MAX_FILE_BYTES // 1024} KB 的上限"):
        run("import_catalog", str(path))
    assert time.monotonic() - started < 2
    with pytest.raises(CatalogError, match="上限"):  # the service caps text handed to it too
        catalog_import(text="#" * (MAX_FILE_BYTES + 1))


@pytest.mark.django_db
def test_a_link_to_a_sub_agent_neither_in_the_file_nor_the_database_is_refused(tmp_path):
    lines = refused(tmp_path, """catalog: 1
mcp_services:
  - name: calendar
    protocol: streamable-http
    config: {url: "https://mcp.example.edu.cn/mcp"}
agents:
  - slug: xiaozhi
    name: 校园小智
    mcp_services: [calendar]
    sub_agents: [ghost]
routing_cases:
  - agent: nobody
    question: 你好
    must_not_call: ["*"]
""")
    assert lines == [
        "agents 第 1 条（xiaozhi）: sub_agents: 子 Agent“ghost”既不在文件里，也不在数据库里",
        "routing_cases 第 1 条（nobody · 你好）: agent: 智能体“nobody”既不在文件里，也不在数据库里",
    ]
    assert not McpService.objects.exists()  # the valid service was rolled back with the rest


@pytest.mark.django_db
def test_duplicate_names_are_refused(tmp_path):
    lines = refused(tmp_path, """catalog: 1
sub_agents:
  - {name: canteen, description: 食堂, base_url: "http://a:8000"}
  - {name: canteen, description: 食堂二, base_url: "http://b:8000"}
routing_cases:
  - {agent: xiaozhi, question: 你好, must_not_call: ["*"]}
  - {agent: xiaozhi, question: 你好, must_not_call: ["*"]}
""")
    assert "sub_agents 第 2 条（canteen）: name: 与第 1 条重复" in lines
    assert "routing_cases 第 2 条（xiaozhi · 你好）: agent/question: 与第 1 条重复" in lines


@pytest.mark.django_db
def test_a_key_written_twice_in_one_entry_is_refused(tmp_path):
    lines = refused(tmp_path, "catalog: 1\nagents:\n  - slug: a\n    slug: b\n    name: x\n")
    assert lines == ["YAML 错误（第 4 行第 5 列）：键 'slug' 在同一个映射里出现了两次"]


BILLION_LAUGHS = """catalog: 1
a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]
"""


@pytest.mark.django_db
def test_a_billion_laughs_alias_bomb_is_refused_at_its_first_anchor(tmp_path):
    started = time.monotonic()
    lines = refused(tmp_path, BILLION_LAUGHS)
    assert lines == ["YAML 错误（第 2 行第 4 列）：不支持 YAML 锚点和别名（&、*）：请把内容直接写出"]
    assert time.monotonic() - started < 2
    # An alias alone (no anchor in this document) is refused as well.
    assert refused(tmp_path, "catalog: 1\nagents: *x\n")[0].startswith("YAML 错误")


@pytest.mark.django_db
def test_deep_nesting_is_refused(tmp_path):
    lines = refused(tmp_path, "catalog: 1\nagents: " + "[" * 5000 + "]" * 5000 + "\n")
    assert lines[0].startswith("YAML 错误") and "嵌套超过 32 层" in lines[0]


@pytest.mark.django_db
def test_values_admin_refuses_are_refused_with_admins_messages(tmp_path):
    lines = refused(tmp_path, """catalog: 1
mcp_services:
  - {name: no-command, protocol: stdio, config: {args: ["-m", "x"]}}
  - {name: ftp, protocol: streamable-http, config: {url: "ftp://files.example.edu.cn", colour: red}}
  - {name: approvals, protocol: sse, config: {url: "https://x.example.edu.cn/sse"}, tool_approvals: {drop: maybe}}
sub_agents:
  - {name: Canteen, description: 食堂, base_url: "http://canteen:8000", timeout_sec: 0}
routing_cases:
  - {agent: xiaozhi, question: 你好}
""")
    assert lines[:4] == [
        "mcp_services 第 1 条（no-command）: config: stdio 需要 “command”：要运行的程序，字符串，如 \"python\"。",
        "mcp_services 第 2 条（ftp）: config: streamable-http 需要 “url”：http:// 或 https:// 开头的地址。",
        "mcp_services 第 2 条（ftp）: config: 不认识的键：colour。",
        "mcp_services 第 3 条（approvals）: tool_approvals: 工具“drop”的取值须是 auto、ask 或 never。",
    ]
    assert any(line.startswith("sub_agents 第 1 条（Canteen）: name: 名称须以小写字母开头") for line in lines)
    assert any(line.startswith("sub_agents 第 1 条（Canteen）: timeout_sec: ") for line in lines)
    assert lines[-1] == ("routing_cases 第 1 条（xiaozhi · 你好）: agent: 智能体“xiaozhi”既不在文件里，也不在数据库里")


def test_a_routing_case_admin_would_refuse_is_refused(demo_catalog, tmp_path):
    lines = refused(tmp_path, """catalog: 1
routing_cases:
  - {agent: xiaozhi, question: 随便问问}
  - {agent: xiaozhi, question: 食堂, must_call: [call_canteen], must_not_call: [call_canteen]}
  - {agent: xiaozhi, question: 课程, must_call: ["Call Course"], history: [{role: system, content: x}]}
""")
    assert lines[0] == "routing_cases 第 1 条（xiaozhi · 随便问问）: 条目: 请至少填写一个必须调用或不得调用的工具，否则这个用例什么也不检查。"
    assert lines[1] == "routing_cases 第 2 条（xiaozhi · 食堂）: must_not_call: 这些工具同时出现在“必须调用”里：call_canteen"
    assert lines[2].startswith("routing_cases 第 3 条（xiaozhi · 课程）: history: 第 1 条须是")
    assert lines[3].startswith("routing_cases 第 3 条（xiaozhi · 课程）: must_call: 工具名 'Call Course' 不对")


@pytest.mark.django_db
def test_references_only_where_secrets_belong_and_warnings_where_export_would_write_clear_text(tmp_path, monkeypatch):
    monkeypatch.setenv("MCP_GRADES_FLAG", "--token=" + SECRET)
    lines = refused(tmp_path, """catalog: 1
mcp_services:
  - {name: grades, protocol: stdio, config: {command: /usr/bin/grades-mcp, args: ["${ENV:MCP_GRADES_FLAG}"]}}
""")
    assert lines == ["mcp_services 第 1 条（grades）: config.args[0]: 只有 headers、env 的值和 url 里可以写 ${ENV:变量名}"]

    monkeypatch.setenv("MCP_CANVAS_TENANT", "campus")
    _, err = run("import_catalog", write(tmp_path, f"""catalog: 1
mcp_services:
  - name: canvas
    protocol: sse
    config:
      url: "https://mcp.example.edu.cn/sse?tenant=${{ENV:MCP_CANVAS_TENANT}}"
      headers: {{X-Tenant: "${{ENV:MCP_CANVAS_TENANT}}", X-Api-Key: {SECRET}}}
"""))
    assert err.splitlines() == [
        "警告：mcp_services 第 1 条（canvas）: config.headers.X-Api-Key: 文件里写的是明文，请改为 ${ENV:变量名} 引用",
        "警告：mcp_services 第 1 条（canvas）: config.url: 引用不在密码或像密钥的参数里，导出时它的值会以明文写出",
        "警告：mcp_services 第 1 条（canvas）: config.headers.X-Tenant: 名称不像密钥，导出时这个值会以明文写出",
    ]
    assert McpService.objects.get(name="canvas").config["url"].endswith("?tenant=campus")


@pytest.mark.django_db
@pytest.mark.parametrize(("entry", "expected"), [
    ("{slug: x, name: x, temperature: .nan}", "agents 第 1 条（x）: temperature: 数字须是有限值，实际是 nan"),
    ('{slug: "x\\0y", name: x}', "agents 第 1 条（x\x00y）: slug: 文字里不能有 NUL 字符"),
])
def test_values_no_column_can_hold_are_refused(tmp_path, entry, expected):
    assert refused(tmp_path, f"catalog: 1\nagents:\n  - {entry}\n") == [expected]


@pytest.mark.django_db
@pytest.mark.parametrize(("value", "expected"), [
    ("{1: ask}", "tool_approvals: 映射的键须是字符串"),
    ("{drop: 2024-01-01}", "tool_approvals: 不支持的值 datetime.date(2024, 1, 1)（date）"),
    ("{drop: !!binary aGk=}", "tool_approvals: 不支持的值 b'hi'（bytes）"),
])
def test_yaml_values_json_cannot_store_are_refused(tmp_path, value, expected):
    lines = refused(tmp_path, f"""catalog: 1
mcp_services:
  - {{name: x, protocol: sse, config: {{url: "https://x.example.edu.cn/sse"}}, tool_approvals: {value}}}
""")
    assert lines == [f"mcp_services 第 1 条（x）: {expected}"]


def test_a_routing_case_written_twice_in_the_database_is_warned_of_on_export(demo_catalog):
    case = RoutingCase.objects.get(question="你好")
    RoutingCase.objects.create(agent=case.agent, question=case.question, must_not_call=["*"])
    out, err = run("export_catalog")
    assert err.splitlines() == [
        "警告：路由用例 xiaozhi · 你好 出现了不止一次：导入时会因重复被拒绝，请在后台合并或改写问题"
    ]


def test_the_example_in_the_staff_docs_imports(db, tmp_path, monkeypatch):
    from django.conf import settings

    staff = (settings.BASE_DIR / "docs" / "staff.md").read_text(encoding="utf-8")
    section = staff.split("## Moving a catalog between instances", 1)[1]
    example = section.split("```yaml\n", 1)[1].split("```", 1)[0]
    monkeypatch.setenv("MCP_CANVAS_AUTHORIZATION", SECRET)

    out, _ = run("import_catalog", write(tmp_path, example))

    assert out.strip().endswith("新建 4 个，更新 0 个，未变 0 个（导入从不删除：文件里没有的对象保持原样）")
    assert McpService.objects.get(name="canvas").config["headers"]["Authorization"] == f"Bearer {SECRET}"
    assert list(Agent.objects.get(slug="xiaozhi").sub_agents.values_list("name", flat=True)) == ["canteen"]


def test_an_agent_with_a_model_provider_is_exported_with_a_warning_and_its_provider_kept_on_import(demo_file):
    from agents_app.models import Provider

    provider = Provider.objects.create(name="qwen", base_url="https://dashscope.example.cn/v1",
                                       default_model="qwen-plus")
    Agent.objects.filter(slug="xiaozhi").update(provider=provider, thinking="off")
    _, err = run("export_catalog")
    assert err.splitlines() == [
        "警告：智能体 xiaozhi 的模型提供方和备用提供方不在目录文件里（尚不支持导出），请在目标实例的后台设置"
    ]
    out, _ = run("import_catalog", demo_file)  # the file from before: thinking was the default
    assert "  thinking: 'off' → ''" in out.splitlines()
    assert Agent.objects.get(slug="xiaozhi").provider == provider  # not in the file: left as it is


# What the file leaves out on purpose: per instance (who, from which message), or a section not
# written yet (model providers).
LEFT_OUT = {
    "agents": {"provider"},
    "routing_cases": {"source_message", "created_by"},
}


def test_every_field_staff_set_is_in_its_section_or_left_out_on_purpose():
    from insights_app.catalog.sections import SECTIONS

    for section in SECTIONS:
        model_fields = {f.name for f in section.model._meta.get_fields() if f.concrete} - set(TIMESTAMPS)
        if section.key == "routing_cases":
            model_fields |= {"arg_expectations"}  # the case's children
        written = {f.name for f in section.fields}
        assert model_fields - LEFT_OUT.get(section.key, set()) == written, section.key


def test_the_groups_an_item_is_limited_to_move_with_the_catalog(demo_catalog, tmp_path):
    """Issue 43: `allowed_groups` by name; a group the instance lacks is created, empty, and said
    (the item stays limited, never open to all)."""
    from django.contrib.auth.models import Group

    graduates = Group.objects.create(name="研究生")
    Agent.objects.get(slug="xiaozhi").allowed_groups.add(graduates)
    SubAgent.objects.get(name="canteen").allowed_groups.add(graduates)
    data = yaml.safe_load(catalog_export().text)
    assert data["agents"][0]["allowed_groups"] == ["研究生"]
    assert next(s for s in data["sub_agents"] if s["name"] == "canteen")["allowed_groups"] == ["研究生"]
    assert all(s["allowed_groups"] == [] for s in data["mcp_services"])

    data["mcp_services"][0]["allowed_groups"] = ["教职工"]
    report = catalog_import(text=yaml.safe_dump(data, allow_unicode=True))
    assert any("用户组“教职工”不存在，将新建" in line for line in report.warnings)
    service = McpService.objects.get(name=data["mcp_services"][0]["name"])
    assert [g.name for g in service.allowed_groups.all()] == ["教职工"]
    assert [line for change in report.updated for line in change.lines] == ["allowed_groups: [] → [教职工]"]


def test_knowledge_collections_and_their_links_move_with_the_catalog_but_not_their_files(demo_catalog, settings,
                                                                                         tmp_path):
    """Issue 45: a collection's definition and the agents it is linked to are in the file; its
    documents are files, moved with knowledge_import, and the export says so."""
    from knowledge_app.ingest import document_add
    from knowledge_app.models import KnowledgeCollection

    settings.MEDIA_ROOT = tmp_path
    handbook = KnowledgeCollection.objects.create(slug="handbook", name="学生手册", description="学生手册、转专业")
    document_add(collection=handbook, name="宿舍.md", data="# 宿舍\n\n23:00 关门。".encode())
    Agent.objects.get(slug="xiaozhi").knowledge_collections.add(handbook)
    exported = catalog_export()
    data = yaml.safe_load(exported.text)
    assert data["knowledge_collections"] == [{"slug": "handbook", "name": "学生手册", "description": "学生手册、转专业",
                                              "enabled": True, "synonyms": "", "allowed_groups": []}]
    assert data["agents"][0]["knowledge_collections"] == ["handbook"]
    assert any("knowledge_import" in line for line in exported.warnings)

    handbook.delete()
    report = catalog_import(text=exported.text)
    assert report.changed
    restored = KnowledgeCollection.objects.get(slug="handbook")
    assert list(Agent.objects.get(slug="xiaozhi").knowledge_collections.all()) == [restored]

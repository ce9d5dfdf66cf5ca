import os
import re
import subprocess
import sys
from io import StringIO
from pathlib import Path

import pytest
import yaml
from django.conf import settings
from django.core.management import CommandError, call_command

from subagents_app.models import SubAgent

EXAMPLE = Path(settings.BASE_DIR) / "subagents_app" / "seed" / "subagents.example.yaml"
FIELDS = ("name", "description", "base_url", "domain", "timeout_sec", "enabled")


def run(command: str, *args) -> str:
    out = StringIO()
    call_command(command, *args, stdout=out, stderr=StringIO())
    return out.getvalue()


def catalog() -> list[dict]:
    """Every row with every column, timestamps included: 'changes nothing' means all of it."""
    return list(SubAgent.objects.order_by("name").values())


def write(tmp_path, text: str, name: str = "seed.yaml") -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


@pytest.fixture
def example_entries() -> list[dict]:
    return yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))["agents"]


@pytest.mark.django_db
def test_example_file_imports_every_entry_as_written(example_entries):
    out = run("import_subagents", str(EXAMPLE))

    assert out.strip().endswith(f"新建 {len(example_entries)} 个，更新 0 个，未变 0 个，停用 0 个")
    assert len(example_entries) >= 3
    for entry in example_entries:
        row = SubAgent.objects.get(name=entry["name"])
        assert row.description == entry["description"].strip()
        assert (row.base_url, row.domain, row.timeout_sec, row.enabled) == (
            entry["base_url"],
            entry["domain"],
            entry["timeout_sec"],
            True,
        )
        assert "关键词" in row.description  # the model needs trigger keywords to pick a sub-agent


@pytest.mark.django_db
def test_round_trip_changes_nothing_and_export_is_stable(tmp_path, example_entries):
    run("import_subagents", str(EXAMPLE))
    SubAgent.objects.filter(name=example_entries[0]["name"]).update(enabled=False)
    before = catalog()
    exported = run("export_subagents")

    out = run("import_subagents", write(tmp_path, exported))

    assert out.strip() == f"新建 0 个，更新 0 个，未变 {len(example_entries)} 个，停用 0 个"
    assert catalog() == before  # timestamps included: nothing was saved
    assert run("export_subagents") == exported


@pytest.mark.django_db
def test_export_is_readable_unicode_yaml_in_name_order(tmp_path, canteen):
    SubAgent.objects.create(
        name="academic", description="成绩查询\n关键词：成绩、绩点", base_url="https://jwc.example.edu.cn", enabled=False
    )
    text = run("export_subagents")

    assert "成绩查询" in text and "\\u" not in text  # allow_unicode, not escapes
    data = yaml.safe_load(text)
    assert [a["name"] for a in data["agents"]] == ["academic", "canteen"]
    assert data["agents"][0] == {
        "name": "academic",
        "description": "成绩查询\n关键词：成绩、绩点",
        "base_url": "https://jwc.example.edu.cn",
        "domain": "",
        "timeout_sec": 30,
        "enabled": False,
    }
    assert "enabled" not in data["agents"][1]  # enabled rows look exactly like the seed format
    target = tmp_path / "out.yaml"
    run("export_subagents", str(target))
    assert target.read_text(encoding="utf-8") == text


@pytest.mark.django_db
def test_export_rebuilds_the_catalog_in_an_empty_database(tmp_path, canteen):
    SubAgent.objects.create(name="library", description="图书馆：借书", base_url="http://127.0.0.1:9000", enabled=False)
    wanted = [{k: row[k] for k in FIELDS} for row in catalog()]
    path = write(tmp_path, run("export_subagents"))
    SubAgent.objects.all().delete()

    out = run("import_subagents", path)

    assert "新建 2 个，更新 0 个，未变 0 个，停用 0 个" in out
    assert [{k: row[k] for k in FIELDS} for row in catalog()] == wanted


@pytest.mark.django_db
def test_upsert_updates_only_changed_fields_of_the_row_with_that_name(tmp_path, canteen):
    created_at = canteen.created_at
    path = write(
        tmp_path,
        f"""agents:
  - name: canteen
    description: {canteen.description}
    base_url: http://canteen-agent:8000
    domain: canteen
    timeout_sec: 12
  - name: notice
    description: 通知公告。关键词：通知、讲座
    base_url: http://notice-agent:8000
""",
    )

    out = run("import_subagents", path)

    assert "更新 canteen：timeout_sec" in out
    assert "新建 notice" in out
    assert out.strip().endswith("新建 1 个，更新 1 个，未变 0 个，停用 0 个")
    row = SubAgent.objects.get(name="canteen")
    assert (row.pk, row.timeout_sec, row.created_at) == (canteen.pk, 12, created_at)
    notice = SubAgent.objects.get(name="notice")
    assert (notice.domain, notice.timeout_sec, notice.enabled) == ("", 30, True)  # the format's defaults


@pytest.mark.django_db
def test_dry_run_prints_the_plan_and_changes_nothing(tmp_path, canteen):
    SubAgent.objects.create(name="old-agent", description="旧的", base_url="http://old:1")
    before = catalog()
    path = write(
        tmp_path,
        """agents:
  - {name: canteen, description: 新描述：食堂、菜单, base_url: "http://canteen-agent:8000", domain: canteen}
  - {name: notice, description: 通知, base_url: "http://notice-agent:8000"}
""",
    )

    out = run("import_subagents", path, "--dry-run", "--disable-missing")

    assert "将新建 notice" in out
    assert "将更新 canteen：description" in out
    assert "将停用 old-agent" in out
    assert "试运行（--dry-run）：未做任何修改" in out
    assert "新建 1 个，更新 1 个，未变 0 个，停用 1 个" in out
    assert catalog() == before


@pytest.mark.django_db
def test_disable_missing_disables_only_enabled_rows_absent_from_the_file(tmp_path, canteen):
    SubAgent.objects.create(name="old-agent", description="旧的", base_url="http://old:1")
    SubAgent.objects.create(name="retired", description="早已停用", base_url="http://retired:1", enabled=False)
    path = write(
        tmp_path,
        f"agents:\n  - {{name: canteen, description: '{canteen.description}', "
        f"base_url: 'http://canteen-agent:8000', domain: canteen}}\n",
    )

    assert "新建 0 个，更新 0 个，未变 1 个，停用 0 个" in run("import_subagents", path)
    assert SubAgent.objects.get(name="old-agent").enabled  # not without the flag

    out = run("import_subagents", path, "--disable-missing")

    assert "停用 old-agent" in out and "retired" not in out
    assert "新建 0 个，更新 0 个，未变 1 个，停用 1 个" in out
    assert dict(SubAgent.objects.values_list("name", "enabled")) == {
        "canteen": True,
        "old-agent": False,
        "retired": False,
    }


@pytest.mark.django_db
def test_a_listed_row_is_enabled_unless_the_file_says_otherwise(tmp_path, canteen):
    SubAgent.objects.filter(pk=canteen.pk).update(enabled=False)
    line = f"  - {{name: canteen, description: '{canteen.description}', base_url: 'http://canteen-agent:8000', domain: canteen"
    assert "更新 canteen：enabled" in run("import_subagents", write(tmp_path, f"agents:\n{line}}}\n"))
    assert SubAgent.objects.get(pk=canteen.pk).enabled
    run("import_subagents", write(tmp_path, f"agents:\n{line}, enabled: false}}\n"))
    assert not SubAgent.objects.get(pk=canteen.pk).enabled


GOOD = "{name: notice, description: 通知公告：通知、讲座, base_url: 'http://notice-agent:8000'}"

BROKEN_FILES = {
    "yaml syntax": ("agents: [\n  {name: a\n", "YAML 语法错误"),
    "empty file": ("", "顶层:"),
    "top level is a list": ("- name: canteen\n", "顶层:"),
    "agents is not a list": ("agents: {name: canteen}\n", "顶层:"),
    "unknown top-level key": (f"agents: [{GOOD}]\nagent: []\n", "顶层: 未知的顶层键：agent"),
    "entry not a mapping": (f"agents: [{GOOD}, canteen]\n", "第 2 条（?）: 条目须是映射"),
    "unknown field": (
        "agents: [{name: canteen, description: 食堂, base_url: 'http://c:1', colour: red}]\n",
        "第 1 条（canteen）: colour: 未知字段",
    ),
    "missing field": ("agents: [{name: canteen, base_url: 'http://c:1'}]\n", "第 1 条（canteen）: description: 缺少必填字段"),
    "missing name": ("agents: [{description: 食堂, base_url: 'http://c:1'}]\n", "第 1 条（?）: name: 缺少必填字段"),
    "timeout as text": (
        "agents: [{name: canteen, description: 食堂, base_url: 'http://c:1', timeout_sec: '30'}]\n",
        "第 1 条（canteen）: timeout_sec: 类型错误，应为整数",
    ),
    "timeout as bool": (
        "agents: [{name: canteen, description: 食堂, base_url: 'http://c:1', timeout_sec: true}]\n",
        "第 1 条（canteen）: timeout_sec: 类型错误，应为整数",
    ),
    "name as number": ("agents: [{name: 42, description: 食堂, base_url: 'http://c:1'}]\n", "第 1 条（?）: name: 类型错误"),
    "bad name pattern": (
        f"agents: [{GOOD}, {{name: Canteen_1, description: 食堂, base_url: 'http://c:1'}}]\n",
        "第 2 条（Canteen_1）: name: 名称须以小写字母开头",
    ),
    "name too long": (
        f"agents: [{{name: a{'b' * 63}, description: 食堂, base_url: 'http://c:1'}}]\n",
        f"第 1 条（a{'b' * 63}）: name: ",
    ),
    "timeout zero": (
        "agents: [{name: canteen, description: 食堂, base_url: 'http://c:1', timeout_sec: 0}]\n",
        "第 1 条（canteen）: timeout_sec: 确保该值大于或等于1",
    ),
    "timeout too long": (
        "agents: [{name: canteen, description: 食堂, base_url: 'http://c:1', timeout_sec: 301}]\n",
        "第 1 条（canteen）: timeout_sec: 确保该值小于或等于300",
    ),
    "ftp url": (
        "agents: [{name: canteen, description: 食堂, base_url: 'ftp://files.example.edu.cn'}]\n",
        "第 1 条（canteen）: base_url: 服务地址须是 http:// 或 https://",
    ),
    "not a url": (
        "agents: [{name: canteen, description: 食堂, base_url: canteen-agent}]\n",
        "第 1 条（canteen）: base_url: 服务地址须是",
    ),
    "blank description": (
        "agents: [{name: canteen, description: '   ', base_url: 'http://c:1'}]\n",
        "第 1 条（canteen）: description: ",
    ),
    "duplicate name": (f"agents: [{GOOD}, {GOOD}]\n", "第 2 条（notice）: name: 与第 1 条重名"),
}


@pytest.mark.django_db
@pytest.mark.parametrize("text, expected", BROKEN_FILES.values(), ids=BROKEN_FILES.keys())
def test_a_broken_file_names_the_problem_and_changes_nothing(tmp_path, canteen, text, expected):
    before = catalog()

    with pytest.raises(CommandError) as info:
        run("import_subagents", write(tmp_path, text), "--disable-missing")

    assert expected in str(info.value)
    assert "未做任何修改" in str(info.value)
    assert catalog() == before


@pytest.mark.django_db
def test_every_problem_is_reported_in_file_order_and_good_entries_are_not_written(tmp_path, canteen):
    before = catalog()
    path = write(
        tmp_path,
        f"""agents:
  - {{name: canteen, description: 改了的描述, base_url: 'http://canteen-agent:8000'}}
  - {{name: Bad, description: x, base_url: 'http://b:1', timeout_sec: 500}}
  - {{name: extra, description: x, base_url: 'http://e:1', owner: me}}
  - {GOOD}
""",
    )

    with pytest.raises(CommandError) as info:
        run("import_subagents", path)

    lines = str(info.value).splitlines()[1:]
    assert [line.split(":")[0] for line in lines] == ["第 2 条（Bad）", "第 2 条（Bad）", "第 3 条（extra）"]
    assert [line.split(": ")[1] for line in lines] == ["name", "timeout_sec", "owner"]
    assert catalog() == before
    assert not SubAgent.objects.filter(name="notice").exists()


@pytest.mark.django_db
def test_unreadable_file_is_a_command_error(tmp_path):
    with pytest.raises(CommandError, match="无法读取"):
        run("import_subagents", str(tmp_path / "missing.yaml"))


def test_manage_py_exits_non_zero_on_a_bad_file(tmp_path):
    bad = write(tmp_path, "agents: [\n")
    env = {**os.environ, "DATABASE_URL": f"sqlite:///{tmp_path / 'unused.sqlite3'}", "LOG_DIR": str(tmp_path / "logs")}

    done = subprocess.run(  # noqa: PLW1510 (the return code is asserted)
        [sys.executable, "manage.py", "import_subagents", bad],
        cwd=settings.BASE_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert done.returncode == 1
    assert "CommandError" in done.stderr and "YAML 语法错误" in done.stderr


@pytest.mark.django_db
def test_protocol_round_trips_and_is_written_only_for_a2a(tmp_path, canteen):
    SubAgent.objects.create(name="library", description="图书馆", base_url="http://library-agent:9000",
                            protocol=SubAgent.Protocol.A2A)
    text = run("export_subagents")
    exported = {entry["name"]: entry for entry in yaml.safe_load(text)["agents"]}
    assert exported["library"]["protocol"] == "a2a" and "protocol" not in exported["canteen"]
    path = write(tmp_path, text)
    SubAgent.objects.all().delete()

    run("import_subagents", path)

    assert dict(SubAgent.objects.values_list("name", "protocol")) == {"canteen": "campus-sse", "library": "a2a"}
    bad = write(tmp_path, "agents:\n  - {name: x1, description: d, base_url: 'http://x:1', protocol: grpc}\n", "bad.yaml")
    with pytest.raises(CommandError, match="protocol"):
        run("import_subagents", bad)


@pytest.mark.django_db
def test_approval_policy_round_trips_and_is_written_only_when_it_asks_or_forbids(tmp_path, canteen):
    SubAgent.objects.create(name="course-select", description="选课", base_url="http://course-agent:9000",
                            approval_policy="ask")
    text = run("export_subagents")
    exported = {entry["name"]: entry for entry in yaml.safe_load(text)["agents"]}
    assert exported["course-select"]["approval_policy"] == "ask" and "approval_policy" not in exported["canteen"]
    path = write(tmp_path, text)
    SubAgent.objects.all().delete()

    run("import_subagents", path)

    assert dict(SubAgent.objects.values_list("name", "approval_policy")) == {"canteen": "auto", "course-select": "ask"}
    bad = write(tmp_path, "agents:\n  - {name: x1, description: d, base_url: 'http://x:1', approval_policy: maybe}\n",
                "bad.yaml")
    with pytest.raises(CommandError, match="approval_policy"):
        run("import_subagents", bad)


_ENGLISH = re.compile(r"\b(created|updated|unchanged|disabled|would|dry run|nothing|wrote|cannot|entry|top level)\b")


@pytest.mark.django_db
def test_what_staff_read_is_chinese(tmp_path, canteen):
    """Issue 20 #16: the commands printed English ("created 1, updated 0 …", "wrote …")."""
    path = write(tmp_path, "agents:\n  - {name: notice, description: 通知, base_url: 'http://notice-agent:8000'}\n")
    lines = run("import_subagents", path, "--dry-run", "--disable-missing").splitlines()
    lines += run("import_subagents", path).splitlines()
    lines += run("export_subagents", str(tmp_path / "out.yaml")).splitlines()
    with pytest.raises(CommandError) as info:
        run("import_subagents", write(tmp_path, "agents: [{name: x}]\n", "bad.yaml"))
    lines += str(info.value).splitlines()
    with pytest.raises(CommandError) as missing:
        run("import_subagents", str(tmp_path / "absent.yaml"))
    lines += [str(missing.value)]
    assert lines and all(re.search(r"[\u4e00-\u9fff]", line) for line in lines), lines
    assert not [line for line in lines if _ENGLISH.search(line)], lines

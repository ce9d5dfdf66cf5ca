"""The word lists: imported from a file, kept compiled by each worker, rebuilt at the next check
after any write to them (safety_app.lists_cache, docs/staff.md)."""

import random
import time

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.urls import reverse

from safety_app.lists_cache import matchers_current, stage_matcher, word_list_triggers_install
from safety_app.models import MSG_WORD_SEPARATORS_ONLY, ListWord, WordList

pytestmark = pytest.mark.django_db


def _words_file(tmp_path, words):
    path = tmp_path / "words.txt"
    path.write_text("\n".join(words) + "\n", encoding="utf-8")
    return path


def test_an_import_of_30000_words_is_matched_in_every_stage_it_names(tmp_path, capsys):
    rng = random.Random(44)
    words = sorted({"".join(chr(rng.randint(0x4E00, 0x9FA5)) for _ in range(rng.randint(2, 6))) for _ in range(30_000)})
    path = _words_file(tmp_path, [*words, "", words[0], "  "])  # blank lines and a repeat are skipped

    started = time.perf_counter()
    call_command(
        "moderation_import",
        str(path),
        "--list",
        "广告词",
        "--category",
        "广告",
        "--action",
        "mask",
        "--stages",
        "question,answer",
    )
    imported = time.perf_counter() - started
    started = time.perf_counter()
    matcher = stage_matcher("question")
    built = time.perf_counter() - started
    with capsys.disabled():  # measured, not asserted
        print(f"\nimport of {len(words)} words: {imported:.2f} s; automaton: {built:.2f} s")  # noqa: T201

    word_list = WordList.objects.get(name="广告词")
    assert (word_list.category, word_list.action, word_list.stages()) == ("广告", "mask", ("question", "answer"))
    assert word_list.words.count() == len(words)
    text = f"你好{words[123]}再见"
    assert {h.category for h in matcher.hits(text)} == {"广告"}
    assert stage_matcher("answer").hits(text) and not stage_matcher("reasoning").hits(text)
    assert f"{len(words)} words added, 0 already there" in capsys.readouterr().out

    call_command("moderation_import", str(path), "--list", "广告词", "--category", "广告", "--action", "mask")
    assert word_list.words.count() == len(words)  # run again: nothing doubled
    assert WordList.objects.get(pk=word_list.pk).stages() == ("question", "answer", "reasoning")


@pytest.mark.parametrize(("action", "stages"), [("block", "question,title"), ("hide", "question")])
def test_an_import_with_a_bad_option_is_refused(tmp_path, action, stages):
    path = _words_file(tmp_path, ["词"])
    with pytest.raises(CommandError):
        call_command(
            "moderation_import", str(path), "--list", "x", "--category", "c", "--action", action, "--stages", stages
        )
    assert not WordList.objects.exists()


@pytest.mark.parametrize(
    ("bad", "message"), [("长" * 101, "longer than 100"), ("- ，。", "only spaces or punctuation")]
)
def test_a_word_that_cannot_be_listed_is_refused_before_anything_is_written(tmp_path, bad, message):
    path = _words_file(tmp_path, ["好词", bad])
    with pytest.raises(CommandError, match=message):
        call_command("moderation_import", str(path), "--list", "x", "--category", "c", "--action", "block")
    assert not WordList.objects.exists()


def _list(**fields):
    word_list = WordList.objects.create(name="涉政", category="涉政", action="block", **fields)
    ListWord.objects.create(word_list=word_list, word="法轮")
    return word_list


def test_the_automaton_is_kept_while_the_lists_do_not_change(django_assert_num_queries):
    _list()
    first = stage_matcher("question")
    with django_assert_num_queries(1):  # the stamp
        assert stage_matcher("question") is first


def _add_word(word_list):
    ListWord.objects.create(word_list=word_list, word="代考")


def _disable_by_update(word_list):
    WordList.objects.filter(pk=word_list.pk).update(question=False)


def _delete_by_sql(word_list):
    with connection.cursor() as cursor:  # what a console does: no Django signal is sent
        cursor.execute(f'DELETE FROM "{ListWord._meta.db_table}" WHERE word = %s', ["法轮"])


@pytest.mark.parametrize(
    ("change", "after"),
    [
        (_add_word, {"法轮", "代考"}),
        (_disable_by_update, set()),
        (_delete_by_sql, set()),
    ],
)
def test_any_write_to_the_lists_applies_at_the_next_check(change, after):
    word_list = _list()
    text = "法轮和代考"
    before = stage_matcher("question")
    assert {text[h.start : h.end] for h in before.hits(text)} == {"法轮"}
    change(word_list)
    assert {text[h.start : h.end] for h in stage_matcher("question").hits(text)} == after


def test_the_triggers_survive_being_installed_again():
    word_list_triggers_install()
    word_list = _list()
    stage_matcher("question")
    word_list_triggers_install()
    _add_word(word_list)
    assert len(stage_matcher("question").hits("代考")) == 1


def test_admin_refuses_a_word_of_separators_only(admin_client):
    word_list = _list()
    page = admin_client.post(reverse("admin:safety_app_listword_add"), {"word_list": word_list.pk, "word": " ，. "})
    assert page.status_code == 200 and MSG_WORD_SEPARATORS_ONLY in page.content.decode()
    assert list(ListWord.objects.values_list("word", flat=True)) == ["法轮"]


def test_staff_edit_the_lists_in_admin(admin_client):
    word_list = _list(reasoning=False)
    assert admin_client.get(reverse("admin:safety_app_wordlist_changelist")).status_code == 200
    page = admin_client.get(reverse("admin:safety_app_wordlist_change", args=[word_list.pk]))
    assert page.status_code == 200 and "检查思考过程" in page.content.decode()
    listing = admin_client.get(reverse("admin:safety_app_listword_changelist"), {"q": "法轮"})
    assert listing.status_code == 200 and "法轮" in listing.content.decode()


def test_stages_read_by_the_same_lists_share_one_automaton():
    both = WordList.objects.create(name="全部", category="涉政", action="block")
    ListWord.objects.create(word_list=both, word="法轮")
    matchers = matchers_current()
    assert matchers.by_stage["question"] is matchers.by_stage["answer"] is matchers.by_stage["reasoning"]
    WordList.objects.create(name="只查回答", category="广告", action="mask", question=False, reasoning=False)
    matchers = matchers_current()
    assert matchers.by_stage["question"] is matchers.by_stage["reasoning"] is not matchers.by_stage["answer"]

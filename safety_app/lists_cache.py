"""The word lists' automata, and the moderation model of each stage, kept by each worker while
the database says they are current.

The same idea as the agents' catalog (agents_app/catalog_cache.py): a check reads one row, the
`WordListStamp`, and uses this worker's automata when its token is the one they were built with;
otherwise it reads the lists again and rebuilds them, once. Database triggers change the token on
every write to the lists' tables, by any process and by any means (admin, `moderation_import`,
SQL) — and to the moderation model's (safety_app.model_check) —, so a change applies to the next
turn on every worker without a restart. The triggers are
(re)installed after every `migrate` (safety_app.apps). A database other than SQLite and
PostgreSQL has no triggers here: it rebuilds at every check.
"""

import threading
from dataclasses import dataclass

from campus_agent.base.stamps import stamp_token, stamp_triggers_install, stamps_kept
from safety_app.matcher import Entry, Matcher
from safety_app.model_check import ModelConfig, model_config
from safety_app.models import STAGES, ListWord, ModerationModel, WordList, WordListStamp


@dataclass(frozen=True)
class Matchers:
    token: str | None
    by_stage: dict[str, Matcher]
    models: dict[str, ModelConfig | None]  # the enabled moderation model that checks each stage


_kept: Matchers | None = None
_reload = threading.Lock()


def stage_matcher(stage: str) -> Matcher:
    """The matcher of a stage ("question", "answer", "reasoning") as the lists are now (sync)."""
    return matchers_current().by_stage[stage]


def matchers_current() -> Matchers:
    """Every stage's matcher, and moderation model, as they are now (sync: one read of the stamp)."""
    global _kept
    if not stamps_kept():
        return _build(token=None)
    token = _stamp_token()
    kept = _kept
    if kept is None or kept.token != token:
        with _reload:  # a burst right after a change builds once
            if _kept is None or _kept.token != token:
                _kept = _build(token=token)  # read after the token: never older than it
            kept = _kept
    return kept


def _stamp_token() -> str:
    return stamp_token(WordListStamp)


def _build(*, token: str | None) -> Matchers:
    lists = {row.pk: row for row in WordList.objects.filter(enabled=True)}
    words: dict[str, dict[str, Entry]] = {stage: {} for stage in STAGES}
    rows = ListWord.objects.filter(word_list__in=list(lists)).values_list("word_list_id", "word").iterator(2000)
    for list_id, word in rows:
        word_list = lists[list_id]
        entry = Entry(category=word_list.category, action=word_list.action)
        for stage in word_list.stages():
            known = words[stage].get(word)
            if known is None or known.action != "block":  # a word both blocked and masked blocks
                words[stage][word] = entry
    # Stages read by the same lists share one automaton: building one of 100,000 words takes
    # about 2 s of CPU (bench/moderation.py), and lists usually apply to every stage.
    built: dict[tuple[int, ...], Matcher] = {}
    by_stage = {}
    for stage in STAGES:
        readers = tuple(sorted(pk for pk, row in lists.items() if stage in row.stages()))
        if readers not in built:
            built[readers] = Matcher(words[stage])
        by_stage[stage] = built[readers]
    model = ModerationModel.objects.filter(enabled=True).first()  # at most one (its constraint)
    models = {stage: model_config(model) if model is not None and getattr(model, stage) else None for stage in STAGES}
    return Matchers(token=token, by_stage=by_stage, models=models)


# --- the triggers -----------------------------------------------------------------------------
def word_list_triggers_install(*, using: str = "default") -> None:
    """Creates the triggers that change the stamp's token, where they are missing (idempotent)."""
    stamp_triggers_install(using=using, model=WordListStamp,
                           tables=[model._meta.db_table for model in (WordList, ListWord, ModerationModel)],
                           function="word_list_stamp_touch", sqlite_name="{table}_stamp_{event}",
                           postgres_name="{table}_stamp")

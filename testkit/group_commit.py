"""Watching a group commit (campus_agent.base.group_commit) in tests: the same functions, with the
size of every group noted, and calls made all at once on a fresh event loop."""
import asyncio

from campus_agent.base.group_commit import GroupCommit


def group_commit_watched(commit: GroupCommit, groups: list[int]) -> GroupCommit:
    """A GroupCommit writing with `commit`'s own `many` and `one`, noting each group's size in
    `groups` (a group of one is written by `one`)."""
    def many(items):
        groups.append(len(items))
        return commit._many(items)

    def one(item):
        groups.append(1)
        return commit._one(item)

    return GroupCommit(many=many, one=one)


def all_at_once(commit: GroupCommit, items: list) -> list:
    """`commit(item)` for every item at the same moment; their outcomes (an exception as itself)."""
    async def together():
        return await asyncio.gather(*(commit(item) for item in items), return_exceptions=True)

    return asyncio.run(together())

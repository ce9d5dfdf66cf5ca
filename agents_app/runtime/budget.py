"""The turn's wall-clock budget (TURN_BUDGET_SEC): steps awaited under one deadline."""
import asyncio


def turn_deadline(ctx) -> float:
    """The turn's deadline in event-loop time: the one its runner set on the context, else
    TURN_BUDGET_SEC from now."""
    if ctx.deadline is not None:
        return ctx.deadline
    from django.conf import settings

    return asyncio.get_running_loop().time() + settings.TURN_BUDGET_SEC


class BudgetSpent(Exception):
    """The turn's wall-clock budget (TURN_BUDGET_SEC) ran out."""


async def within(awaitable, deadline: float):
    """Awaits one step under the turn deadline (event-loop time). Only steps are bounded, never a
    `yield`: a timeout spanning a yield would cancel the consumer's task at an unrelated await."""
    scope = asyncio.timeout_at(deadline)
    try:
        async with scope:
            return await awaitable
    except TimeoutError:
        if scope.expired():
            raise BudgetSpent from None
        raise

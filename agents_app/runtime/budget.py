"""The turn's wall-clock budget (TURN_BUDGET_SEC): steps awaited under one deadline."""
import asyncio


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

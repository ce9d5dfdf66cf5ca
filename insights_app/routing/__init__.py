"""Routing cases replayed against an agent's catalog: judge the first tool choice, run nothing.

    catalog = await routing_catalog(agent=agent, mode=mode)       # ask.py: prompt, model, tools
    results = await routing_replay(catalog=catalog, cases=specs, repeat=3, pass_rate=0.66)
    check = routing_check_run(agent=agent, trigger=...)            # checks.py: the above, stored
"""

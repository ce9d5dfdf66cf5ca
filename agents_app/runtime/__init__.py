"""The agent runtime: LLM client, tool loop, tools. chat_app enters through `turn_stream`."""

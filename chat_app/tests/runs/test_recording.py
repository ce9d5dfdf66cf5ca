"""TurnRecorder: which rows a turn's events become (no database needed)."""
from agents_app.runtime.events import Chunk, Done, Error, ToolCall, ToolChunk, ToolResult
from chat_app.runs.recording import TOOL_CUT_MESSAGE, TurnRecorder


def _record(*events) -> TurnRecorder:
    recorder = TurnRecorder()
    for event in events:
        recorder.add(event)
    return recorder


def test_plain_answer_is_one_final_row():
    rows = _record(Chunk("你"), Chunk("好"), Done(full_text="你好", usage={"total_tokens": 5})).rows()
    assert len(rows) == 1
    assert (rows[0].role, rows[0].content, rows[0].meta, rows[0].is_final) == ("assistant", "你好", {"usage": {"total_tokens": 5}}, True)


def test_two_rounds_with_parallel_calls():
    recorder = _record(
        Chunk("先查"),
        ToolCall("c1", "call_canteen", '{"message": "菜单"}'),
        ToolCall("c2", "tools__add", '{"a": 1, "b": 2}'),
        ToolChunk("c1", "call_canteen", "一食堂"),
        ToolResult("c2", "tools__add", ok=True, content="3"),
        ToolResult("c1", "call_canteen", ok=False, content="子 Agent 响应超时，请稍后重试。", error="超时"),
        ToolCall("c3", "tools__echo", '{"text": "x"}'),
        ToolResult("c3", "tools__echo", ok=True, content="x", chart={"type": "bar"}),
        Chunk("结果"),
        Chunk("如下"),
        Done(full_text="先查结果如下", chart={"type": "bar"}),
    )
    rows = recorder.rows()
    assert [(r.role, r.content) for r in rows] == [
        ("assistant", "先查"), ("tool", "子 Agent 响应超时，请稍后重试。"), ("tool", "3"),
        ("assistant", ""), ("tool", "x"),
        ("assistant", "结果如下"),
    ]
    assert [c["id"] for c in rows[0].meta["tool_calls"]] == ["c1", "c2"]
    assert rows[0].meta["tool_calls"][1]["function"] == {"name": "tools__add", "arguments": '{"a": 1, "b": 2}'}
    assert rows[1].meta == {"tool_call_id": "c1", "tool": "call_canteen", "ok": False, "error": "超时"}
    assert rows[2].meta == {"tool_call_id": "c2", "tool": "tools__add", "ok": True}
    assert rows[4].chart == {"type": "bar"}
    assert rows[-1].chart == {"type": "bar"} and rows[-1].is_final
    assert recorder.tool_call_count == 3


def test_interrupted_round_gets_cut_tool_rows_and_partial_reply():
    recorder = _record(Chunk("我查"), ToolCall("c1", "call_canteen", "{}"), ToolCall("c2", "tools__add", "{}"),
                       ToolResult("c2", "tools__add", ok=True, content="3"))
    recorder.interrupt()
    rows = recorder.rows()
    assert [r.role for r in rows] == ["assistant", "tool", "tool", "assistant"]
    assert rows[1].content == TOOL_CUT_MESSAGE and rows[1].meta == {
        "tool_call_id": "c1", "tool": "call_canteen", "ok": False, "interrupted": True}
    assert rows[2].content == "3"
    assert rows[-1].meta == {"interrupted": True} and rows[-1].content == ""


def test_runtime_failure_is_recorded_with_its_errors():
    recorder = _record(Chunk("说到一半"), Error(50003, "AI 模型回答中断，请稍后重试。"), Done(full_text="说到一半", interrupted=True))
    (row,) = recorder.rows()
    assert row.content == "说到一半"
    assert row.meta == {"interrupted": True, "errors": [{"code": 50003, "message": "AI 模型回答中断，请稍后重试。"}]}


def test_a_done_without_text_events_keeps_its_full_text():
    (row,) = _record(Done(full_text="直接给出的回答")).rows()
    assert row.content == "直接给出的回答"


def test_a_tool_rows_meta_keeps_the_results_links_images_and_label():
    recorder = TurnRecorder()
    recorder.add(ToolCall("c1", "docs__handbook", "{}"))
    recorder.add(ToolResult("c1", "docs__handbook", True, "见链接", links=[{"uri": "https://a.example/x", "name": "x"}],
                            images=[{"src": "data:image/png;base64,AAAA"}], label="学生手册查询"))
    tool_row = recorder.rows()[1]
    assert tool_row.meta["links"] == [{"uri": "https://a.example/x", "name": "x"}]
    assert tool_row.meta["images"] == [{"src": "data:image/png;base64,AAAA"}]
    assert tool_row.meta["label"] == "学生手册查询"
    plain = TurnRecorder()
    plain.add(ToolCall("c2", "tools__add", "{}"))
    plain.add(ToolResult("c2", "tools__add", True, "3"))
    assert set(plain.rows()[1].meta) == {"tool_call_id", "tool", "ok"}  # nothing added when absent


def test_a_cut_call_keeps_the_text_its_sub_agent_streamed():
    """Issue 20 point 12: the stopped call's row kept only 工具调用被中断; the page had shown more."""
    recorder = _record(ToolCall("c1", "call_canteen", "{}"), ToolChunk("c1", "call_canteen", "一食堂今天"),
                       ToolChunk("c1", "call_canteen", "有红烧肉"), ToolCall("c2", "tools__add", "{}"),
                       ToolResult("c2", "tools__add", ok=True, content="3"), ToolChunk("c2", "tools__add", "late"))
    recorder.interrupt()
    cut, done = recorder.rows()[1:3]
    assert cut.content == f"一食堂今天有红烧肉\n\n（{TOOL_CUT_MESSAGE}）"
    assert cut.meta == {"tool_call_id": "c1", "tool": "call_canteen", "ok": False, "interrupted": True}
    assert done.content == "3"  # a finished call's row is its result, whatever streamed


def test_a_cut_turn_s_done_text_is_everything_the_student_was_sent():
    """Issue 20 (12): a stopped call's `done` had full_text "" although the notice before the call
    had been sent; the reply row keeps only what follows the last round, as before."""
    from agents_app.runtime.events import Chunk, ToolCall
    from chat_app.runs.recording import TurnRecorder

    recorder = TurnRecorder()
    recorder.add(Chunk("（以下内容由关键词匹配自动转给“食堂助手”回答）", fallback=True))
    recorder.add(ToolCall(call_id="call_1", tool="call_canteen", args="{}"))
    recorder.interrupt()
    assert recorder.reply_text == ""
    assert recorder.full_text == "（以下内容由关键词匹配自动转给“食堂助手”回答）"
    assert [c.call_id for c in recorder.calls_cut()] == ["call_1"]

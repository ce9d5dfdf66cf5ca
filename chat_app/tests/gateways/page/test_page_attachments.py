"""Attachments on the chat page (issue 26 point 1), in headless Chromium: the paperclip, a file
dropped on the question box and a pasted screenshot are uploaded at once and shown as chips; a
file the server refuses says why; the question goes with them, the model gets them, and the
sent question keeps its chips after a reload. Audited with axe."""
import base64
import json

import pytest

from chat_app.models import Message
from chat_app.tests.conversations.test_uploads import PNG
from chat_app.tests.gateways.page.test_page_a11y import serious_violations
from testkit.web.page_helpers import ask, wait_answered

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

TRAY = "#attachment-tray .attachment"
# Dispatches a drop or a paste carrying one file, as the browser does for a real one.
FILE_EVENT = """([selector, kind, name, type, b64]) => {
    const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
    const data = new DataTransfer();
    data.items.add(new File([bytes], name, {type}));
    const target = document.querySelector(selector);
    if (kind === 'paste') {
        target.dispatchEvent(new ClipboardEvent('paste', {clipboardData: data, bubbles: true, cancelable: true}));
    } else {
        target.dispatchEvent(new DragEvent('dragover', {dataTransfer: data, bubbles: true, cancelable: true}));
        target.dispatchEvent(new DragEvent('drop', {dataTransfer: data, bubbles: true, cancelable: true}));
    }
}"""


@pytest.fixture
def site(browser_page, user, password, agent_factory, settings, tmp_path):
    settings.MEDIA_ROOT = str(tmp_path / "media")
    agent_factory(accepts_images=True)
    browser_page.sign_in(user)
    return browser_page


def _chips(page) -> list[str]:
    return page.eval_on_selector_all(TRAY, "(chips) => chips.map((c) => c.querySelector('.attachment-name')"
                                           "?.textContent + '|' + (c.className))")


def test_picked_dropped_and_pasted_files_go_with_the_question_and_stay_after_a_reload(site, llm_settings, tmp_path):
    page = site.page
    notice = tmp_path / "考试通知.txt"
    notice.write_text("期末考试 6 月 18 日", encoding="utf-8")
    assert page.get_attribute("#attach", "aria-label").startswith("添加附件")  # the paperclip opens this picker
    page.set_input_files("#attach-picker", str(notice))
    page.evaluate(FILE_EVENT, ["#composer", "drop", "课表.png", "image/png", base64.b64encode(PNG).decode()])
    page.evaluate(FILE_EVENT, ["#input", "paste", "image.png", "image/png", base64.b64encode(PNG).decode()])
    page.wait_for_function("() => document.querySelectorAll('#attachment-tray .attachment:not(.attachment-uploading)')"
                           ".length === 3")
    assert [c.split("|")[0] for c in _chips(page)] == ["考试通知.txt", "课表.png", "image.png"]
    assert page.query_selector_all("#attachment-tray .attachment-thumb")  # images show a thumbnail
    assert serious_violations(page) == []
    site.screenshot("attachments-tray")

    llm_settings.reply_text("6 月 18 日考试。")
    ask(page, "这些附件说了什么")
    wait_answered(page)
    assert page.is_hidden("#attachment-tray")
    sent = [m for m in llm_settings.requests[-1].body["messages"] if m["role"] == "user"][-1]["content"]
    assert sent[1]["text"].startswith("附件《考试通知.txt》的内容") and sent[3]["type"] == "image_url"
    question = Message.objects.get(role="user")
    assert [a["name"] for a in question.meta["attachments"]] == ["考试通知.txt", "课表.png", "image.png"]

    page.reload()
    page.wait_for_selector(".msg-user .attachment-list .attachment")
    names = page.eval_on_selector_all(".msg-user .attachment-name", "(n) => n.map((x) => x.textContent)")
    assert names == ["考试通知.txt", "课表.png", "image.png"]
    # The thumbnails come from the owner-only endpoint and load (natural size of the 1×1 PNG).
    page.wait_for_function("() => [...document.querySelectorAll('.msg-user .attachment-thumb')]"
                           ".every((i) => i.complete && i.naturalWidth === 1)")

    # Regenerating the answer sends the question with its files again.
    llm_settings.reply_text("还是 6 月 18 日。")
    page.click(".exchange:last-child [data-action=regenerate]")
    wait_answered(page)
    again = [m for m in llm_settings.requests[-1].body["messages"] if m["role"] == "user"][-1]["content"]
    assert [p["type"] for p in again] == [p["type"] for p in sent]


def test_a_file_the_server_refuses_says_why_and_is_not_sent(site, llm_settings, tmp_path):
    page = site.page
    program = tmp_path / "setup.exe"
    program.write_bytes(b"MZ\x90\x00" + b"\x00" * 200)
    page.set_input_files("#attach-picker", str(program))
    page.wait_for_selector("#attachment-tray .attachment-failed [role=alert]")
    assert "只能上传图片" in page.text_content("#attachment-tray .attachment-failed")
    llm_settings.reply_text("好的。")
    ask(page, "你好")
    wait_answered(page)
    assert json.dumps(llm_settings.requests[-1].body["messages"][-1]["content"], ensure_ascii=False) == '"你好"'
    site.errors[:] = [e for e in site.errors if "status of 415" not in e]  # the refusal the chip showed

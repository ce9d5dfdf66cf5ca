"""A tool chip shows an MCP tool's resource links and a trusted service's images (tool_result
`links`, `images`, `label`), built by static/js/view.js as DOM nodes, in real Chromium."""
import pytest

from testkit.mcp.servers import PIXEL_PNG_B64

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PIXEL = f"data:image/png;base64,{PIXEL_PNG_B64}"


@pytest.fixture
def chat(browser_page, user, password):
    browser_page.sign_in(user)
    return browser_page


def test_links_and_images_are_shown_and_unsafe_ones_are_not(chat):
    shown = chat.page.evaluate(
        """async ([pixel]) => {
            const { AssistantTurn } = await import('/static/js/view.js');
            const box = document.createElement('div');
            document.body.append(box);
            const turn = new AssistantTurn(box);
            turn.toolCall({ call_id: 'c1', tool: 'docs__handbook' });
            turn.toolResult({ call_id: 'c1', tool: 'docs__handbook', ok: true, label: '学生手册查询',
                links: [{ uri: 'https://jwc.example.edu.cn/handbook.pdf', name: '学生手册' },
                        { uri: 'javascript:window.__xss=1', name: '坏链接' }],
                images: [{ src: pixel }, { src: 'data:image/svg+xml;base64,PHN2Zz4=' },
                         { src: 'https://evil.example.com/p.png' }] });
            await new Promise((r) => requestAnimationFrame(r));
            const chip = box.querySelector('.tool');
            return {
                name: chip.querySelector('.tool-name').textContent,
                open: chip.open,
                links: [...chip.querySelectorAll('a')].map((a) => [a.textContent, a.href, a.rel, a.target]),
                images: [...chip.querySelectorAll('img')].map((i) => [i.src, i.alt, i.complete && i.naturalWidth]),
            };
        }""",
        [PIXEL],
    )
    assert shown["name"] == "学生手册查询" and shown["open"]
    assert shown["links"] == [["学生手册", "https://jwc.example.edu.cn/handbook.pdf", "noopener noreferrer", "_blank"]]
    assert [src for src, _, _ in shown["images"]] == [PIXEL]
    assert shown["images"][0][1] == "工具返回的图片"


def test_a_result_without_extras_adds_nothing(chat):
    children = chat.page.evaluate(
        """async () => {
            const { AssistantTurn } = await import('/static/js/view.js');
            const box = document.createElement('div');
            document.body.append(box);
            const turn = new AssistantTurn(box);
            turn.toolCall({ call_id: 'c1', tool: 'call_canteen' });
            turn.toolResult({ call_id: 'c1', tool: 'call_canteen', ok: true });
            return box.querySelectorAll('.tool-media, .tool a, .tool img').length;
        }"""
    )
    assert children == 0


def test_links_images_and_label_come_back_from_stored_rows(chat):
    """After a reload the chip is rebuilt from the tool row's meta (stored by the recorder)."""
    shown = chat.page.evaluate(
        """async ([pixel]) => {
            const { historyRender } = await import('/static/js/history.js');
            const box = document.createElement('div');
            document.body.append(box);
            historyRender(box, [
                { id: 'q', role: 'user', content: '学生手册在哪', meta: {} },
                { id: 'a1', role: 'assistant', content: '',
                  meta: { tool_calls: [{ id: 'c1', type: 'function', function: { name: 'docs__handbook' } }] } },
                { id: 't1', role: 'tool', content: '见链接',
                  meta: { tool_call_id: 'c1', tool: 'docs__handbook', ok: true, label: '学生手册查询',
                          links: [{ uri: 'https://jwc.example.edu.cn/handbook.pdf', name: '学生手册' },
                                  { uri: 'javascript:window.__xss=1', name: '坏链接' }],
                          images: [{ src: pixel }] } },
                { id: 'a2', role: 'assistant', content: '手册在教务处网站。', meta: {} },
            ]);
            await new Promise((r) => requestAnimationFrame(r));
            const chip = box.querySelector('.tool');
            return {
                name: chip.querySelector('.tool-name').textContent,
                links: [...chip.querySelectorAll('a')].map((a) => [a.textContent, a.href, a.rel]),
                images: [...chip.querySelectorAll('img')].map((i) => i.src),
            };
        }""",
        [PIXEL],
    )
    assert shown["name"] == "学生手册查询"
    assert shown["links"] == [["学生手册", "https://jwc.example.edu.cn/handbook.pdf", "noopener noreferrer"]]
    assert shown["images"] == [PIXEL]

"""The page's own modules (static/js) run in real Chromium: SSE parser, sanitizer, chart shape.

They are imported into the logged-in chat page, so they run next to the same vendored marked,
DOMPurify and Chart.js that students get.
"""
import pytest

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

XSS_PAYLOADS = [
    "<script>window.__xss = 1</script>",
    '<img src=x onerror="window.__xss = 2">',
    '<img src="https://evil.example.com/track.png">',
    "![tracker](https://evil.example.com/pixel.gif)",
    '![inline](data:image/svg+xml;base64,PHN2ZyBvbmxvYWQ9IndpbmRvdy5fX3hzcz0zIi8+)',
    "[点我](javascript:window.__xss=4)",
    "[点我](JaVaScRiPt&#58;window.__xss=5)",
    "[数据](data:text/html;base64,PHNjcmlwdD53aW5kb3cuX194c3M9Njwvc2NyaXB0Pg==)",
    '<a href="javascript:window.__xss=7">x</a>',
    '<svg onload="window.__xss=8"></svg>',
    '<iframe src="javascript:window.__xss=9"></iframe>',
    '<details open ontoggle="window.__xss=10">x</details>',
    '<form action="javascript:window.__xss=11"><button>go</button></form>',
    '<div style="background:url(javascript:window.__xss=12)">styled</div>',
    "<math><mtext><table><mglyph><style><img src=x onerror=window.__xss=13></style></mglyph></table></mtext></math>",
]

# Markup that makes a browser load a URL without a click. The "remote" host is a closed loopback
# port: should anything ever load, nothing leaves the machine.
ELSEWHERE = "http://127.0.0.1:9"
REMOTE_LOAD_PAYLOADS = [
    f'<table background="{ELSEWHERE}/table.gif"><tbody background="{ELSEWHERE}/tbody.gif"><tr>'
    f'<th background="{ELSEWHERE}/th.gif">h</th><td background="{ELSEWHERE}/td.gif">表格</td></tr></tbody></table>',
    f'<img src="{ELSEWHERE}/img.gif" alt="远程图">',
    f'<img src="/static/img/logo.svg" srcset="{ELSEWHERE}/srcset.gif 2x" longdesc="{ELSEWHERE}/longdesc">',
    f'<image src="{ELSEWHERE}/image-tag.gif">',
    f'<picture><source srcset="{ELSEWHERE}/source.gif"><img src="/static/img/logo.svg"></picture>',
    f'<svg><image href="{ELSEWHERE}/svg-image.gif"/><image xlink:href="{ELSEWHERE}/xlink.gif"/></svg>',
    f'<video poster="{ELSEWHERE}/poster.gif" src="{ELSEWHERE}/video.mp4"></video>',
    f'<audio src="{ELSEWHERE}/audio.mp3"></audio><track src="{ELSEWHERE}/track.vtt">',
    f'<div style="background:url({ELSEWHERE}/style.gif)">带样式</div>',
    f'<style>@import url({ELSEWHERE}/import.css); p {{ background: url({ELSEWHERE}/rule.gif) }}</style>',
    f'<a href="https://jwc.example.edu.cn/" ping="{ELSEWHERE}/ping">外链</a>',
    f'<object data="{ELSEWHERE}/object"></object><embed src="{ELSEWHERE}/embed">',
    f'<blockquote cite="{ELSEWHERE}/cite">引用</blockquote><q cite="{ELSEWHERE}/q">q</q>',
    f'<input type="image" src="{ELSEWHERE}/input.gif"><button formaction="{ELSEWHERE}/formaction">b</button>',
    f'<form action="{ELSEWHERE}/action"></form><iframe src="{ELSEWHERE}/iframe"></iframe>',
    f'<body background="{ELSEWHERE}/body.gif"><div background="{ELSEWHERE}/div.gif">块</div>',
    f'<link rel="stylesheet" href="{ELSEWHERE}/link.css"><meta http-equiv="refresh" content="0;url={ELSEWHERE}/meta">',
    f'<span lowsrc="{ELSEWHERE}/lowsrc.gif" dynsrc="{ELSEWHERE}/dynsrc.gif" data="{ELSEWHERE}/data">属性</span>',
    f'<marquee background="{ELSEWHERE}/marquee.gif">m</marquee><area href="{ELSEWHERE}/area">',
    f'![markdown]({ELSEWHERE}/markdown.gif) [链接]({ELSEWHERE}/link "标题")',
]
# What may remain on an element after sanitizing: links (<a href>) and same-origin images
# (<img src>) are the only attributes that name a URL.
ALLOWED_ATTRIBUTES = {
    "a": {"href", "title", "target", "rel"},
    "img": {"src", "alt", "title"},
    "code": {"class"},
    "th": {"align", "colspan", "rowspan"},
    "td": {"align", "colspan", "rowspan"},
    "ol": {"start"},
}


@pytest.fixture
def chat(browser_page, user, password):
    browser_page.sign_in(user)
    return browser_page


def test_sse_parser_accepts_what_the_standard_allows(chat):
    stream = (
        ": comment line\r\n\r\n"
        'event: message\r\nid: 1\r\ndata:{"type":"session","conversation_id":"c1"}\r\n\r\n'
        'data: {"type": "chunk",\ndata: "content": "多行"}\n\n'
        "data: not json\n\n"
        "data: [1, 2]\n\n"
        'data: {"type":"chunk","content":"回车"}\r\r'
        ": ping\n\n"
        'data: {"type":"done","full_text":"x","chart":null}'  # last frame without its blank line
    )
    frames = chat.page.evaluate(
        """async (stream) => {
            const { SseParser } = await import('/static/js/sse.js');
            // Fed one character at a time: frames (and CRLF pairs) split across network reads.
            const parser = new SseParser();
            const out = [];
            for (const ch of stream) out.push(...parser.push(ch));
            out.push(...parser.push('\\n\\n'));
            return out;
        }""",
        stream,
    )
    assert frames == [
        {"type": "session", "conversation_id": "c1"},
        {"type": "chunk", "content": "多行"},
        {"type": "chunk", "content": "回车"},
        {"type": "done", "full_text": "x", "chart": None},
    ]


def test_markdown_payloads_are_rendered_inert(chat):
    chat.hostile_markup = True
    result = chat.page.evaluate(
        """async (payloads) => {
            const { markdownFragment } = await import('/static/js/markdown.js');
            const box = document.createElement('div');
            box.id = 'xss-box';
            for (const p of payloads) box.append(markdownFragment(p));
            document.body.append(box);
            await new Promise((r) => setTimeout(r, 300));  // give any injected handler time to fire
            const attrs = [...box.querySelectorAll('*')].flatMap((n) => [...n.attributes].map((a) => a.name + '=' + a.value));
            return {
                xss: window.__xss,
                tags: [...new Set([...box.querySelectorAll('*')].map((n) => n.tagName.toLowerCase()))],
                attrs,
                text: box.textContent,
            };
        }""",
        XSS_PAYLOADS,
    )
    assert result["xss"] is None
    assert not {"script", "img", "svg", "iframe", "form", "button", "style", "math"} & set(result["tags"]), result["tags"]
    assert not [a for a in result["attrs"] if a.startswith(("on", "style="))], result["attrs"]
    hrefs = [a for a in result["attrs"] if a.startswith(("href=", "src="))]
    assert not [h for h in hrefs if "javascript" in h.lower() or "data:" in h.lower() or "evil" in h], hrefs
    assert "点我" in result["text"] and "styled" in result["text"]  # the words survive, the code does not


def test_markdown_keeps_what_a_reader_needs(chat):
    html = chat.page.evaluate(
        """async () => {
            const { markdownFragment } = await import('/static/js/markdown.js');
            const box = document.createElement('div');
            box.append(markdownFragment(
                '# 标题\\n\\n**粗体** 与 `代码`\\n\\n```python\\nprint("<b>hi</b>")\\n```\\n\\n' +
                '| 课程 | 余量 |\\n|---|---|\\n| 高数 | 3 |\\n\\n' +
                '[教务处](https://jwc.example.edu.cn) [本站](/c/) ![logo](/static/img/logo.svg)'
            ));
            return box.innerHTML;
        }"""
    )
    assert "<strong>粗体</strong>" in html and "<code>代码</code>" in html
    assert '<pre><code class="language-python">print("&lt;b&gt;hi&lt;/b&gt;")' in html  # code shown, not run
    assert "<table>" in html and "<td>高数</td>" in html
    assert 'href="https://jwc.example.edu.cn"' in html and 'rel="noopener noreferrer nofollow"' in html
    assert 'href="/c/"' in html
    assert 'src="/static/img/logo.svg"' in html  # same-origin images stay


def test_chart_shape_is_validated(chat):
    verdicts = chat.page.evaluate(
        """async () => {
            const { chartSpecParse } = await import('/static/js/charts.js');
            const ok = (s) => chartSpecParse(s) !== null;
            const base = { type: 'bar', title: '人数', labels: ['一食堂', '二食堂'], datasets: [{ label: '人次', data: [1, 2] }] };
            return {
                full: ok(base),
                line: ok({ ...base, type: 'line' }),
                pie: ok({ ...base, type: 'pie' }),
                clean: chartSpecParse({ type: 'bar', labels: ['a', 'b'], datasets: [{ data: [3, 4] }], extra: '<b>' }),
                values: ok({ type: 'bar', labels: ['a', 'b'], values: [3, 4] }),
                unknownType: ok({ ...base, type: 'radar' }),
                html: ok({ ...base, type: '<img src=x>' }),
                lengths: ok({ ...base, datasets: [{ label: 'x', data: [1] }] }),
                strings: ok({ ...base, datasets: [{ label: 'x', data: ['1', 2] }] }),
                infinite: ok({ ...base, datasets: [{ label: 'x', data: [1, Infinity] }] }),
                noLabels: ok({ ...base, labels: [] }),
                notObject: ok('<script>'),
                nested: ok({ ...base, labels: [{ toString: 1 }, 'b'] }),
            };
        }"""
    )
    assert verdicts["full"] and verdicts["line"] and verdicts["pie"]
    assert verdicts["clean"] == {
        "type": "bar", "title": "", "labels": ["a", "b"], "datasets": [{"label": "", "data": [3, 4]}]
    }
    # One shape only (docs/api.md): a one-series `values` shorthand is not a chart.
    refused = ["values", "unknownType", "html", "lengths", "strings", "infinite", "noLabels", "notObject", "nested"]
    assert {k: verdicts[k] for k in refused} == {k: False for k in refused}


def test_no_attribute_that_loads_a_url_survives(chat):
    """Issue 9: `<table background=…>` (and td/th/tbody) kept a remote URL that Chromium fetched.
    Only links and same-origin images may name a URL after sanitizing."""
    chat.hostile_markup = True
    result = chat.page.evaluate(
        """async (payloads) => {
            const { markdownFragment } = await import('/static/js/markdown.js');
            // Left detached: what the sanitizer keeps is inspected, nothing is laid out or loaded.
            const box = document.createElement('div');
            for (const p of payloads) box.append(markdownFragment(p));
            return {
                attrs: [...box.querySelectorAll('*')].flatMap(
                    (n) => [...n.attributes].map((a) => [n.tagName.toLowerCase(), a.name, a.value])),
                text: box.textContent,
            };
        }""",
        REMOTE_LOAD_PAYLOADS,
    )
    attrs = result["attrs"]
    unexpected = [a for a in attrs if a[1] not in ALLOWED_ATTRIBUTES.get(a[0], set())]
    assert unexpected == []
    naming_elsewhere = [a for a in attrs if "127.0.0.1:9" in a[2]]
    # The one link to elsewhere stays a link; it opens in a new tab that cannot reach this one.
    assert naming_elsewhere == [["a", "href", f"{ELSEWHERE}/link"]]
    assert ["a", "href", "https://jwc.example.edu.cn/"] in attrs
    for tag, name, value in attrs:
        if tag == "a" and name == "rel":
            assert value.split()[:2] == ["noopener", "noreferrer"]
    assert [a for a in attrs if a[:2] == ["a", "target"]] == [["a", "target", "_blank"]] * 2
    assert [a for a in attrs if a[:2] == ["img", "src"]] == [["img", "src", "/static/img/logo.svg"]] * 2
    assert "表格" in result["text"] and "外链" in result["text"] and "块" in result["text"]


def test_markdown_tables_keep_their_alignment_and_code_its_language(chat):
    html = chat.page.evaluate(
        """async () => {
            const { markdownFragment } = await import('/static/js/markdown.js');
            const box = document.createElement('div');
            box.append(markdownFragment(
                '| 课程 | 余量 |\\n|:---|---:|\\n| 高数 | 3 |\\n\\n```js\\nlet a = 1;\\n```\\n\\n' +
                '<p class="msg-error" id="input">伪造的错误</p><code class="msg-error">c</code>'
            ));
            return box.innerHTML;
        }"""
    )
    assert '<th align="left">课程</th>' in html and '<td align="right">3</td>' in html
    assert '<code class="language-js">let a = 1;' in html
    # The page's own classes and ids are not for model text: no fake error box, no clobbered id.
    assert "msg-error" not in html and 'id="input"' not in html and '<code>c</code>' in html

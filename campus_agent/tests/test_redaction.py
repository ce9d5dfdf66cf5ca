from campus_agent.base.redaction import TEXT_LOG_LIMIT, clip_text, mask_token, redact_headers


def test_mask_token_keeps_only_the_ends():
    token = "eyJhbGciOiJIUzI1NiJ9.payload.signature-wxyz"
    assert mask_token(token) == "eyJh...wxyz"
    assert "payload" not in mask_token(token)


def test_mask_token_hides_short_and_missing_tokens_entirely():
    assert mask_token("abcdefghijkl") == "***"  # 12 chars: its ends would be most of it
    assert mask_token("abcdefghijklm") == "abcd...jklm"
    assert mask_token("") == mask_token(None) == "<none>"


def test_clip_text_cuts_user_text_to_fifty_characters_on_one_line():
    assert TEXT_LOG_LIMIT == 50
    text = "今天中午吃啥" * 20
    clipped = clip_text(text)
    assert clipped == text[:50] + "…"
    assert clip_text("第一行\n第二行\t 结尾  ") == "第一行 第二行 结尾"
    assert clip_text("x" * 50) == "x" * 50
    assert clip_text(None) == ""
    assert clip_text("abcdef", limit=3) == "abc…"


def test_redact_headers_masks_credentials_whatever_their_case():
    headers = {
        "Authorization": "Bearer secret-jwt",
        "cookie": "sessionid=abc",
        "X-Campus-Token": "campus-secret",
        "Proxy-Authorization": "Basic xyz",
        "X-Request-Id": "0123456789abcdef",
        "Content-Type": "application/json",
    }
    redacted = redact_headers(headers)
    assert redacted == {
        "Authorization": "***",
        "cookie": "***",
        "X-Campus-Token": "***",
        "Proxy-Authorization": "***",
        "X-Request-Id": "0123456789abcdef",
        "Content-Type": "application/json",
    }
    assert headers["Authorization"] == "Bearer secret-jwt"  # the caller's dict is untouched

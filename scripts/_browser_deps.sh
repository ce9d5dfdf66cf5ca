# Sourced by test.sh (and run early by .ci/run, beside the virtualenv's install): the browser
# tests' Debian packages, chromium and fonts-noto-cjk so that the page's Chinese is drawn in the
# screenshots (test-artifacts/) instead of boxes (test_page_fonts.py holds it).
if ! command -v chromium >/dev/null 2>&1 || ! dpkg -s fonts-noto-cjk >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "Installing Debian's chromium and fonts-noto-cjk for the browser tests…"
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium fonts-noto-cjk) >/dev/null
  else
    echo "Browser tests need Debian's chromium and CJK fonts: sudo apt-get install -y chromium fonts-noto-cjk" >&2
  fi
fi

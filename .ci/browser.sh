# Headless Chromium for the HTML report test (tests/report/test_browser.py) and for kaleido's static
# image export (dse report --image).
#
#   source .ci/browser.sh      # exports DSE_CHROMIUM, DSE_CHROMEDRIVER, DSE_REQUIRE_BROWSER=1
#
# Installs Debian's `chromium` and `chromium-driver` when either is missing (apt-get update
# first). It never fails the caller: when something cannot be installed it says so, and
# DSE_REQUIRE_BROWSER=1 makes the browser test fail with that reason instead of skipping, so a
# CI run cannot pass without having opened the report in a real browser.

_dse_browser_setup() {
    export DSE_REQUIRE_BROWSER=1
    local chromium driver
    chromium=$(command -v chromium || command -v chromium-browser || true)
    driver=$(command -v chromedriver || true)
    if [ -z "$chromium" ] || [ -z "$driver" ]; then
        if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
            echo "browser.sh: chromium or chromedriver missing and no root apt-get to install them" >&2
            return 0
        fi
        echo "browser.sh: installing chromium and chromium-driver (apt-get)" >&2
        apt-get update -qq >/dev/null 2>&1 || true
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver \
            >/dev/null 2>&1 || {
            echo "browser.sh: apt-get install chromium chromium-driver failed" >&2
            return 0
        }
        chromium=$(command -v chromium || command -v chromium-browser || true)
        driver=$(command -v chromedriver || true)
    fi
    if [ -n "$chromium" ]; then
        export DSE_CHROMIUM="$chromium"
        # kaleido (static images) finds its browser through BROWSER_PATH.
        export BROWSER_PATH="${BROWSER_PATH:-$chromium}"
    fi
    [ -n "$driver" ] && export DSE_CHROMEDRIVER="$driver"
    echo "browser.sh: chromium=${DSE_CHROMIUM:-missing} chromedriver=${DSE_CHROMEDRIVER:-missing}" >&2
    return 0
}
_dse_browser_setup
unset -f _dse_browser_setup

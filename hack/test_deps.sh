#!/usr/bin/env bash
# System tools some tests drive for real (Debian packages): promtool (package `prometheus`) for the
# chart's alert rules, chromium for the simulator's HTML report. Installed with apt when missing; as
# a non-root user without sudo it prints what to install and leaves the tests to fail loudly.
# Arguments narrow it to some of them: `hack/test_deps.sh prometheus` (the e2e's Prometheus, `make e2e`).
set -euo pipefail
[ $# -gt 0 ] || set -- prometheus chromium
need=()
for tool in "$@"; do
  case "$tool" in
    prometheus) command -v prometheus >/dev/null && command -v promtool >/dev/null || need+=(prometheus) ;;
    chromium) command -v chromium >/dev/null || command -v chromium-browser >/dev/null || need+=(chromium) ;;
    *) echo "hack/test_deps.sh: unknown tool $tool (prometheus, chromium)" >&2; exit 2 ;;
  esac
done
[ ${#need[@]} -eq 0 ] && exit 0
apt=(apt-get -o DPkg::Lock::Timeout=600)
if [ "$(id -u)" -ne 0 ]; then
  if sudo -n true 2>/dev/null; then apt=(sudo "${apt[@]}"); else
    echo "hack/test_deps.sh: install ${need[*]} (Debian: apt-get install ${need[*]})" >&2; exit 0; fi
fi
"${apt[@]}" update -q
DEBIAN_FRONTEND=noninteractive "${apt[@]}" install -y -q --no-install-recommends "${need[@]}"

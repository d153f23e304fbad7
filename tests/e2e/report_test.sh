#!/usr/bin/env bash
# `loom report`: the HTML page of a run, opened in headless Chromium (Debian's chromium).
#   - a DiT run on 2 processes with sample grids every 3 steps, a NaN step (skipped) and a
#     stop and resume; a GPT run on one process;
#   - each page loads with no console message, its DOM (after loading) has every section;
#   - a screenshot of each is checked structurally: not blank; every plot drawn (each plot has
#     a frame: the screenshot must hold its top and bottom edge for each plot the page
#     declares); series drawn in
#     their colour; the sample grids and the event markers shown (DiT).
# The run itself writes report.html at its end; `loom report` makes it again at any time.
# Usage: report_test.sh LOOM WORK_DIR
set -uo pipefail
loom=$1 work=$2
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work" && mkdir -p "$work"
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
browser=$(command -v chromium || command -v chromium-browser || true)
[ -n "$browser" ] || { echo "FAIL: chromium is not installed (scripts/bootstrap.sh installs it)"; exit 1; }

dit=(train "$here/tiny_dit.toml" --set "run.out_dir=\"$work\"" --set train.steps=8 --set sample.every=3
     --set train.log_every=1)
LOOM_FAULT="nan:rank=0,step=4" "$loom" launch -n 2 -- "${dit[@]}" --set train.stop_after=5 > "$work/dit1.log" 2>&1 ||
  fail "dit run: $(tail -3 "$work/dit1.log")"
"$loom" launch -n 2 -- "${dit[@]}" --resume > "$work/dit2.log" 2>&1 || fail "dit resume: $(tail -3 "$work/dit2.log")"
grep -q "report: $work/tiny_dit/report.html" "$work/dit2.log" || fail "the DiT run did not write its report"
"$loom" train "$here/tiny_gpt.toml" --set "run.out_dir=\"$work\"" --set train.steps=6 --set eval.every=3 \
  --set sample.tokens=0 > "$work/gpt.log" 2>&1 || fail "gpt run: $(tail -3 "$work/gpt.log")"
"$loom" report "$work/tiny_gpt" --out "$work/gpt.html" || fail "loom report failed"

for page in "$work/tiny_dit/report.html" "$work/gpt.html"; do
  kind=$(basename "$(dirname "$page")")
  [ "$kind" = tiny_dit ] || kind=tiny_gpt
  flags=(--headless --no-sandbox --disable-gpu --disable-dev-shm-usage --hide-scrollbars
         --user-data-dir="$work/chromium-$kind" --enable-logging=stderr --v=0)
  timeout 120 "$browser" "${flags[@]}" --dump-dom "file://$page" > "$work/$kind.dom" 2> "$work/$kind.console" ||
    fail "$kind: chromium could not load the page: $(tail -2 "$work/$kind.console")"
  if grep -E "CONSOLE|Uncaught" "$work/$kind.console"; then fail "$kind: console messages"; fi
  # The summary names the machine and threads, and gives units (%, MB, images/s or tokens/s).
  for want in '<td>threads</td><td>[0-9]' '<td>cpu</td>' ' %</td>' ' MB</td>' ' \(images\|tokens\)/s</td>'; do
    grep -q "$want" "$work/$kind.dom" || fail "$kind: the summary lacks '$want'"
  done
  # Axes from the data: a series that is never negative has no negative tick (throughput).
  /usr/bin/python3 - "$work/$kind.dom" <<'PY' || fail "$kind: the throughput axis goes below zero"
import re, sys
dom = open(sys.argv[1]).read()
svg = [p for p in dom.split("<svg ")[1:] if re.match(r'[^>]*>\s*<title>throughput', p)]
assert svg, "no throughput plot"
ticks = re.findall(r'text-anchor="end">([^<]*)<', svg[0])
assert ticks and all(not t.startswith("-") for t in ticks), ticks
PY
  for id in summary loss lr throughput memory step-time eval samples events ranks; do
    grep -q "<section id=\"$id\">" "$work/$kind.dom" || fail "$kind: no section '$id' in the rendered page"
  done
  timeout 120 "$browser" "${flags[@]}" --window-size=1200,6000 --screenshot="$work/$kind.png" "file://$page" \
    > /dev/null 2>&1 || fail "$kind: no screenshot"
  /usr/bin/python3 - "$work/$kind.png" "$page" "$kind" <<'PY' || fail "$kind: the screenshot's structure"
import re, sys
from PIL import Image
shot, page, kind = sys.argv[1:4]
html = open(page).read()
plots = html.count('<svg class="plot"')
im = Image.open(shot).convert("RGB")
w, h = im.size
px = im.load()
white = sum(1 for y in range(0, h, 4) for x in range(0, w, 4) if px[x, y] == (255, 255, 255))
inked = 1 - white / ((w // 4) * (h // 4))
# Plot frames (#999999, 680 px wide): rows holding a long run of that colour, 2 per plot.
rows = 0
for y in range(h):
    run = best = 0
    for x in range(w):
        run = run + 1 if px[x, y] == (0x99, 0x99, 0x99) else 0
        best = max(best, run)
    rows += best >= 600
blue = sum(1 for y in range(h) for x in range(0, w, 2) if px[x, y] == (0x1f, 0x77, 0xb4))
dark = sum(1 for y in range(h) for x in range(0, w, 2) if px[x, y] == (0, 0, 0))
print(f"{kind}: {w}x{h} screenshot, {inked:.1%} inked, {plots} plots declared, {rows} frame edges, "
      f"{blue} series pixels (sampled), {dark} black pixels (sampled)")
ok = inked > 0.03 and rows == 2 * plots and plots >= 8 and blue > 50 * plots
if kind == "tiny_dit":
    images = len(re.findall(r'<img alt="', html))
    markers = html.count('class="marker"')
    print(f"{kind}: {images} sample grids, {markers} event markers")
    ok = ok and images == 3 and markers >= 2 and dark > 2000  # steps 3, 6, the end; NaN and resume
sys.exit(0 if ok else 1)
PY
done
grep -q "skipped_step at step 4" "$work/tiny_dit/report.html" && grep -q "resumed at step 5" "$work/tiny_dit/report.html" ||
  fail "the DiT report lacks the skipped step or the resumption"
grep -q "Ranks (2)" "$work/tiny_dit/report.html" || fail "the DiT report does not show 2 ranks"
[ $failures -eq 0 ] || { echo "$failures failure(s)"; exit 1; }
echo "PASS (screenshots: $work/tiny_dit.png, $work/tiny_gpt.png)"

"""The report in a real browser: headless Chromium (Debian's ``chromium``) loads it with no console
error, shows the verdict, the headline figure and the summary table, fits a phone's width (no
table overflows at 390 px, every <details> opened), fits a 1280 px container, and leaves
screenshots under ``test-artifacts/``. On the rendered page, at 390 and 1280 px, the verdicts are
consistent: no model shows two different headline AUCs, no row or card reads "valid" beside "no
valid audit", and every "consistent" verdict states the audit's certifiable maximum."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from html import escape, unescape
from pathlib import Path

import pytest

import dpaudit

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None)

pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="chromium is not installed (Debian: apt-get install chromium; .ci/run installs it)"
)

# Runs in a copy of the report (the report itself carries no script and its CSP forbids any).
PROBE = """<script>
(function () {
  function box(sel) {
    var el = document.querySelector(sel);
    if (!el) return null;
    var r = el.getBoundingClientRect(), s = getComputedStyle(el);
    return {w: r.width, h: r.height, top: r.top + scrollY, display: s.display, visibility: s.visibility,
            opacity: s.opacity};
  }
  var verdict = box('#verdict-1');
  // open every <details> so that folded tables are laid out and measured too
  Array.prototype.forEach.call(document.querySelectorAll('details'), function (d) { d.open = true; });
  var tables = Array.prototype.map.call(document.querySelectorAll('table'), function (t) {
    var wrap = t.parentElement, r = t.getBoundingClientRect();
    return {id: t.id || t.className, right: r.right, width: r.width, scroll: wrap.scrollWidth,
            client: wrap.clientWidth, own: t.scrollWidth};
  });
  // every figure's text as rendered: its size on screen (font size in the SVG's units times the
  // SVG's scale) and its box; and every image's rendered against its natural width
  function rect(el) { var r = el.getBoundingClientRect(); return {l: r.left, t: r.top, r: r.right, b: r.bottom}; }
  var figures = Array.prototype.map.call(document.querySelectorAll('figure svg.figure-svg'), function (svg) {
    var r = svg.getBoundingClientRect(), view = svg.viewBox.baseVal;
    var scale = view && view.width ? r.width / view.width : 1;
    var texts = Array.prototype.filter.call(svg.querySelectorAll('text, tspan'), function (t) {
      return Array.prototype.some.call(t.childNodes, function (n) { return n.nodeType === 3 && n.data.trim(); });
    });
    return {id: svg.id, width: r.width, right: r.right,
            texts: texts.map(function (t) {
              return {text: t.textContent.trim(), px: parseFloat(getComputedStyle(t).fontSize) * scale, box: rect(t)};
            })};
  });
  var images = Array.prototype.map.call(document.querySelectorAll('main img'), function (img) {
    var r = img.getBoundingClientRect();
    return {alt: img.alt, natural: img.naturalWidth, width: r.width, right: r.right};
  });
  // what a reader sees of the verdicts: every headline AUC by model, the text of every summary row
  // and verdict card, every verdict label
  function visible(el) { var r = el.getBoundingClientRect(); return r.width > 0 && r.height > 0; }
  var headlines = Array.prototype.map.call(document.querySelectorAll('.headline-auc'), function (el) {
    return {model: el.getAttribute('data-model'), text: el.innerText.trim(), visible: visible(el)};
  });
  var texts = Array.prototype.map.call(document.querySelectorAll('#summary-table tbody tr, details.verdict'),
                                       function (el) { return el.innerText; });
  var labels = Array.prototype.map.call(document.querySelectorAll('.verdict-word'), function (el) {
    return el.innerText.trim();
  });
  var main = document.querySelector('main').getBoundingClientRect();
  var out = {verdict: verdict, headline: box('#headline-figure svg'), table: box('#summary-table'),
             rows: document.querySelectorAll('#summary-table tbody tr').length,
             viewport: innerWidth, page: document.documentElement.scrollWidth, tables: tables,
             container: main.width, figures: figures, images: images,
             headlines: headlines, verdict_texts: texts, verdict_labels: labels,
             widest_figure: Math.max.apply(null, Array.prototype.map.call(
                 document.querySelectorAll('figure svg'), function (e) { return e.getBoundingClientRect().width; }))};
  // into the page that frames the report (see probe()), or the report itself when it is the page
  var pre = parent.document.createElement('pre'); pre.id = 'probe-result'; pre.textContent = JSON.stringify(out);
  parent.document.body.appendChild(pre);
})();
</script>"""


def chromium(
    url: str, tmp_path: Path, *extra: str, width: int = 1280, height: int = 2000
) -> subprocess.CompletedProcess:
    profile = tmp_path / f"profile-{len(list(tmp_path.glob('profile-*')))}"
    argv = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        f"--user-data-dir={profile}",
        "--enable-logging=stderr",
        "--v=0",
        "--hide-scrollbars",
        f"--window-size={width},{height}",
        "--virtual-time-budget=5000",
        *extra,
        url,
    ]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120)


def console_messages(stderr: str) -> list[str]:
    """Console output of the page (errors, CSP violations, failed loads): Chromium logs each
    as ``...:CONSOLE(...)] "message", source: ...`` on stderr."""
    return [line for line in stderr.splitlines() if re.search(r":CONSOLE(\(\d+\)|:\d+)\]", line)]


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("browser")
    result = dpaudit.compare(
        "csbm",
        defenses=["mlp-dp", "gcn"],
        epsilons=[1, "inf"],
        attacks=["mia-threshold", "link-steal", "embedding-probe"],
        dataset_options={"num_nodes": 160, "num_classes": 3, "num_features": 8, "avg_degree": 5.0, "seed": 2},
        overrides={"mlp-dp": {"epochs": 3}, "gcn": {"epochs": 30}},
        attack_settings={
            "mia-threshold": {"n_boot": 50},
            "link-steal": {"runs": 1, "max_pairs": 150, "n_boot": 50},
            "embedding-probe": {"projections": ["tsne"], "max_plot_nodes": 80, "n_boot": 50},
        },
        out=out / "study",
        progress=False,
    )
    assert len(result.done) == 3
    return result.to_html(out / "report.html")


def test_console_detection_catches_errors(tmp_path):
    """The check below can fail: a page with a console error and a blocked fetch is caught."""
    page = tmp_path / "bad.html"
    page.write_text(
        '<!DOCTYPE html><meta http-equiv="Content-Security-Policy" content="default-src \'none\'">'
        '<p>x</p><img src="https://example.invalid/a.png"><script>console.error("boom")</script>'
    )
    proc = chromium(page.as_uri(), tmp_path, "--dump-dom")
    assert len(console_messages(proc.stderr)) >= 2, proc.stderr[-2000:]


@pytest.fixture(scope="module")
def audit_report(tmp_path_factory) -> Path:
    """A single-model audit (the verdict box first, no per-ε panels)."""
    from dpaudit.app.pipeline import train
    from dpaudit.data.datasets import csbm

    out = tmp_path_factory.mktemp("browser-audit")
    ds = csbm(num_nodes=160, num_classes=3, num_features=8, avg_degree=5.0, seed=2)
    model = train("gcn", ds, epsilon="inf", seed=0, overrides={"epochs": 30}).model
    result = dpaudit.audit(
        model,
        dataset=ds,
        attacks=["mia-threshold", "link-steal"],
        quick=True,
        settings={"link-steal": {"max_pairs": 100}},
        progress=False,
    )
    return result.to_html(out / "audit.html")


def probe(report: Path, tmp_path: Path, name: str, width: int, height: int) -> dict:
    """Layout numbers measured by the browser on a copy of the report with a probe script.

    The copy is laid out in a frame exactly ``width`` × ``height`` px: headless Chromium keeps
    its window at least 500 px wide, so a 390 px window alone would lay a phone's page out at
    500 px. A ``srcdoc`` frame shares the framing page's origin, so the probe can report there."""
    html = report.read_text(encoding="utf-8")
    html = re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", html).replace("</body>", PROBE + "</body>")
    page = tmp_path / f"probe-{name}.html"
    page.write_text(
        '<!DOCTYPE html><html><body style="margin: 0"><iframe style="border: 0; display: block; '
        f'width: {width}px; height: {height}px" srcdoc="{escape(html, quote=True)}"></iframe></body></html>',
        encoding="utf-8",
    )
    probed = chromium(page.as_uri(), tmp_path, "--dump-dom", width=max(width, 1280), height=height + 100)
    assert console_messages(probed.stderr) == []
    match = re.search(r'<pre id="probe-result">(.*?)</pre>', probed.stdout, flags=re.S)
    assert match, probed.stdout[-1000:]
    measured = json.loads(unescape(match.group(1)))
    assert measured["viewport"] == width, measured["viewport"]
    return measured


def screenshot(report: Path, tmp_path: Path, name: str, width: int, height: int) -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / f"{name}.png"
    shot.unlink(missing_ok=True)
    shooting = chromium(report.as_uri(), tmp_path, f"--screenshot={shot}", width=width, height=height)
    assert console_messages(shooting.stderr) == []
    assert shot.exists() and shot.stat().st_size > 10_000
    import matplotlib.image as mpimg

    pixels = mpimg.imread(shot)
    assert pixels.shape[1] == width and pixels[..., :3].std() > 0.05  # not a blank page
    return shot


def check_layout(m: dict, name: str, rows: int) -> None:
    for key in ("verdict", "headline", "table"):
        box = m[key]
        assert box and box["w"] > 100 and box["h"] > 30, (name, key, box)
        assert box["display"] != "none" and box["visibility"] == "visible" and float(box["opacity"]) > 0.5
    assert m["verdict"]["top"] < m["table"]["top"]  # the verdict comes first
    assert m["rows"] == rows
    assert m["page"] <= m["viewport"] + 1, f"{name}: the page scrolls sideways ({m['page']} > {m['viewport']})"
    assert m["widest_figure"] <= m["viewport"]
    assert len(m["tables"]) >= 3
    assert overflowing(m) == [], name
    problems = figure_problems(m)
    assert m["figures"] and problems == [], (name, problems)


MIN_TEXT_PX = 10  # figure text at a readable size on screen, at 390 px as at 1280 px
MIN_IMAGE_PX = 300  # projections narrower than this are too small to read on any screen


def figure_problems(m: dict) -> list:
    """What makes a figure hard to read in this window: text under :data:`MIN_TEXT_PX`, two texts
    drawn over each other (boxes sharing more than 1 px each way), a figure sticking out of the
    window, an image stretched past its pixels (blurry) or shrunk under :data:`MIN_IMAGE_PX`."""
    problems = []
    for fig in m["figures"]:
        problems += [(fig["id"], "small", t["text"], round(t["px"], 1)) for t in fig["texts"] if t["px"] < MIN_TEXT_PX]
        for i, a in enumerate(fig["texts"]):
            for b in fig["texts"][i + 1 :]:
                width = min(a["box"]["r"], b["box"]["r"]) - max(a["box"]["l"], b["box"]["l"])
                height = min(a["box"]["b"], b["box"]["b"]) - max(a["box"]["t"], b["box"]["t"])
                if width > 1 and height > 1:
                    problems.append((fig["id"], "overlap", a["text"], b["text"]))
        if fig["right"] > m["viewport"] + 1:
            problems.append((fig["id"], "overflow", fig["right"]))
    for img in m["images"]:
        if img["width"] > img["natural"] + 1 or img["width"] < min(MIN_IMAGE_PX, m["viewport"] - 40):
            problems.append((img["alt"], "image", img["natural"], img["width"]))
        if img["right"] > m["viewport"] + 1:
            problems.append((img["alt"], "overflow", img["right"]))
    return problems


def verdict_problems(m: dict) -> list:
    """What makes the verdicts contradict each other on the rendered page: a model with two
    different headline AUCs (or a hidden one), a row or card reading "valid" beside "no valid
    audit", a "consistent" verdict without the largest ε its audit could certify."""
    problems = []
    by_model: dict[str, set] = {}
    for h in m["headlines"]:
        by_model.setdefault(h["model"], set()).add(h["text"])
        if not h["visible"]:
            problems.append(("hidden headline", h["model"]))
    problems += [("two headline AUCs", model, sorted(v)) for model, v in by_model.items() if len(v) > 1]
    for text in m["verdict_texts"]:
        if "no valid audit" in text and re.search(r"\bvalid\b", text.replace("no valid audit", "")):
            problems.append(("valid beside no valid audit", text[:120]))
    for label in m["verdict_labels"]:
        if "consistent" in label and not re.search(r"could certify ε ≤ \d", label):
            problems.append(("consistent without its power", label))
    return problems


def overflowing(m: dict) -> list[dict]:
    """Tables wider than their box (they would scroll sideways) or sticking out of the window."""
    return [
        t
        for t in m["tables"]
        if t["scroll"] > t["client"] + 1 or t["own"] > t["width"] + 1 or t["right"] > m["viewport"] + 1
    ]


def test_report_loads_cleanly_and_shows_its_content(report, tmp_path):
    proc = chromium(report.as_uri(), tmp_path, "--dump-dom")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert console_messages(proc.stderr) == []
    dom = proc.stdout
    assert 'id="headline-figure"' in dom and "<svg" in dom[dom.index('id="headline-figure"') :]
    assert 'id="summary-table"' in dom and 'id="verdict-1"' in dom

    for name, width, height in (("desktop", 1280, 1000), ("phone", 390, 844)):
        m = probe(report, tmp_path, name, width, height)
        check_layout(m, name, rows=3)
        assert verdict_problems(m) == [], (name, verdict_problems(m))
        assert len({h["model"] for h in m["headlines"]}) == 3  # every model has its one headline
        assert len(m["images"]) == 3  # one t-SNE panel per model, measured too
        if name == "desktop":  # the summary fits the 1280 px container: no sideways scrolling
            assert m["table"]["w"] <= m["container"] + 1
        screenshot(report, tmp_path, f"report-{name}", width, height)


def test_single_model_audit_at_390_px(audit_report, tmp_path):
    dom = chromium(audit_report.as_uri(), tmp_path, "--dump-dom").stdout
    assert 'id="verdict-1" open' in dom and 'id="fig-overview"' in dom
    for name, width, height in (("audit-desktop", 1280, 1000), ("audit-phone", 390, 844)):
        m = probe(audit_report, tmp_path, name, width, height)
        check_layout(m, name, rows=1)
        assert verdict_problems(m) == [], (name, verdict_problems(m))
        assert m["verdict"]["top"] < 844  # the verdict box is on the first screen of a phone
        screenshot(audit_report, tmp_path, f"report-{name}", width, height)


def test_overflow_check_can_fail(tmp_path):
    """The table measurement catches a table wider than a phone."""
    page = tmp_path / "wide.html"
    cells = "".join(f"<td>column-{i}-wide-content</td>" for i in range(12))
    page.write_text(
        '<!DOCTYPE html><meta name="viewport" content="width=device-width"><main>'
        '<details id="verdict-1"><summary>v</summary>x</details>'
        f'<div class="table-wrap" style="overflow-x:auto"><table id="summary-table"><tr>{cells}</tr></table></div>'
        '<figure id="headline-figure"><svg width="100" height="100"></svg></figure></main></body></html>'
    )
    m = probe(page, tmp_path, "wide", 390, 844)
    assert [t["id"] for t in overflowing(m)] == ["summary-table"]


def test_figure_check_can_fail(tmp_path):
    """The figure measurement catches tiny text, text drawn over text and a stretched image."""
    import base64

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(1, 1), dpi=50)  # 50 px: any display width stretches it
    buf = __import__("io").BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    png = base64.b64encode(buf.getvalue()).decode("ascii")
    page = tmp_path / "figures.html"
    page.write_text(
        '<!DOCTYPE html><meta name="viewport" content="width=device-width"><main>'
        '<details id="verdict-1"><summary>v</summary>x</details><table id="summary-table"></table>'
        '<figure id="headline-figure"><svg class="figure-svg" id="fig-bad" viewBox="0 0 400 100" '
        'style="width: 100%"><text x="10" y="50" style="font: 2px sans-serif">tiny</text>'
        '<text x="100" y="50" style="font: 20px sans-serif">first label</text>'
        '<text x="110" y="55" style="font: 20px sans-serif">second label</text></svg></figure>'
        f'<figure><img src="data:image/png;base64,{png}" alt="stretched" style="width: 100%"></figure>'
        "</main></body>"
    )
    m = probe(page, tmp_path, "figures", 1280, 800)
    problems = {p[:2] for p in figure_problems(m)}
    assert problems == {("fig-bad", "small"), ("fig-bad", "overlap"), ("stretched", "image")}, figure_problems(m)


def test_verdict_check_can_fail(tmp_path):
    """The verdict measurement catches two headline AUCs for one model, "valid" beside "no valid
    audit" and a "consistent" verdict without its audit's power."""
    page = tmp_path / "verdicts.html"
    page.write_text(
        '<!DOCTYPE html><meta name="viewport" content="width=device-width"><main>'
        '<details class="verdict" id="verdict-1" open><summary>dpar-gm — <span class="verdict-word">'
        'consistent</span> · AUC <span class="headline-auc" data-model="dpar-gm 4">0.554</span></summary>'
        '</details><table id="summary-table"><tbody><tr><td>dpar-gm</td><td>'
        '<span class="headline-auc" data-model="dpar-gm 4">0.988</span></td><td>valid</td>'
        "<td>no valid audit</td></tr></tbody></table>"
        '<figure id="headline-figure"><svg width="100" height="100"></svg></figure></main></body>'
    )
    m = probe(page, tmp_path, "verdicts", 1280, 800)
    assert {p[0] for p in verdict_problems(m)} == {
        "two headline AUCs",
        "valid beside no valid audit",
        "consistent without its power",
    }, verdict_problems(m)

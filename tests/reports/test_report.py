"""The HTML report: escaping of hostile labels, a single self-contained file, the JSON sidecar,
re-rendering without retraining, and the AUC ceiling it draws."""

from __future__ import annotations

import copy
import itertools
import json
import math
import re
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest

import dpaudit
from defenses.baselines import MLPDP
from dpaudit.auditing.statistics import auc_ceiling as statistics_auc_ceiling
from dpaudit.auditing.verdict import headline_attack
from dpaudit.data.datasets import csbm, from_data
from dpaudit.training.constraints import COUNT
from dpaudit.training.registry import register_defense
from reports.aggregate import auc_ceiling, build_report_data
from reports.render import render_html

HOSTILE_DATASET = "<script>alert(1)</script> $x$ {{ 7*7 }}"
HOSTILE_DEFENSE = "<img src=x onerror=alert(2)>"


class HostileLabelMLPDP(MLPDP):
    """mlp-dp under a hostile name: the label reaches the report through the whole pipeline."""

    name = HOSTILE_DEFENSE


@dataclass
class Page:
    tags: list
    attrs: list
    text: str


class _Collector(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tags, self.attrs, self.chunks = [], [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.attrs.extend((tag, k, v or "") for k, v in attrs)

    handle_startendtag = handle_starttag

    def handle_data(self, data):
        self.chunks.append(data)


def parse(html: str) -> Page:
    c = _Collector()
    c.feed(html)
    return Page(c.tags, c.attrs, "".join(c.chunks))


@pytest.fixture(scope="module")
def hostile_defense():
    """Registered only while this module's tests run, so no other test sees it."""
    from dpaudit.training import registry

    register_defense(HostileLabelMLPDP)
    yield HOSTILE_DEFENSE
    registry._DEFENSES.pop(HOSTILE_DEFENSE, None)


@pytest.fixture(scope="module")
def study(tmp_path_factory, hostile_defense):
    base = csbm(num_nodes=160, num_classes=3, num_features=8, avg_degree=5, homophily=0.85, feature_signal=1.0, seed=5)
    hostile = from_data(base.data, name=HOSTILE_DATASET, public_facts=True)
    out = tmp_path_factory.mktemp("report") / "study"
    result = dpaudit.compare(
        hostile,
        defenses=[HOSTILE_DEFENSE, "gcn"],
        epsilons=[2, "inf"],
        attacks=["mia-threshold", "embedding-probe"],
        overrides={HOSTILE_DEFENSE: {"epochs": 3}, "gcn": {"epochs": 30}},
        attack_settings={
            "mia-threshold": {"n_boot": 50},
            "embedding-probe": {"projections": ["tsne"], "max_plot_nodes": 80, "n_boot": 50},
        },
        out=out,
        progress=False,
    )
    assert len(result.done) == 3 and not result.failed
    html_path = result.to_html(out / "report.html")
    return result, html_path


def test_hostile_labels_are_escaped(study):
    result, html_path = study
    html = html_path.read_text(encoding="utf-8")
    page = parse(html)
    assert "<script" not in html.lower() and "script" not in page.tags
    assert "<img src=x" not in html
    assert not [a for a in page.attrs if a[1].lower().startswith("on")]  # no event handler attribute
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html and "&lt;img src=x onerror=alert(2)&gt;" in html
    assert HOSTILE_DATASET in page.text and HOSTILE_DEFENSE in page.text  # shown, as text
    assert "{{ 7*7 }}" in page.text  # rendered as text, never evaluated as a template
    # labels inside the SVG figures are escaped text too (matplotlib), and `$` did not start mathtext
    headline = html[html.index('id="headline-figure"') :]
    assert "&lt;img src=x onerror=alert(2)&gt;" in headline[: headline.index("</figure>")]
    imgs = [v for tag, k, v in page.attrs if tag == "img" and k == "src"]
    assert imgs and all(v.startswith("data:image/png;base64,") for v in imgs)  # the t-SNE panels


def test_single_self_contained_file(study):
    result, html_path = study
    html = html_path.read_text(encoding="utf-8")
    page = parse(html)
    assert not re.search(r"https?://|//[a-z0-9.-]+\.[a-z]{2,}/", html, flags=re.I)
    assert not {"link", "script", "iframe", "object", "embed", "base"} & set(page.tags)
    for tag, key, value in page.attrs:
        if key in ("src", "href", "xlink:href", "action", "poster"):
            assert value.startswith(("data:", "#")), (tag, key, value[:60])
    for url in re.findall(r"url\(([^)]*)\)", html):
        assert url.strip("'\" ").startswith("#"), url
    assert "@import" not in html
    csp = [v for tag, k, v in page.attrs if tag == "meta" and k == "content" and "default-src" in v]
    assert csp == ["default-src 'none'; img-src data:; style-src 'unsafe-inline'"]
    assert "@media print" in html and "@media (max-width" in html and 'name="viewport"' in html
    for section in (
        "summary",
        "headline",
        "utility",
        "roc",
        "embeddings",
        "lower-bounds",
        "ledgers",
        "reproducibility",
    ):
        assert f'<section id="{section}">' in html
    assert html.count("<svg") >= 4  # headline, utility, ROC, lower bounds


def _numbers(data) -> set[str]:
    """Every number in the sidecar in each format the report prints numbers in."""
    out: set[str] = set()

    def walk(v):
        if isinstance(v, bool) or v is None:
            return
        if isinstance(v, (int, float)):
            out.update({f"{v:.3f}", f"{v:.1f}", f"{v:.1e}", f"{v:g}", str(v)})
        elif isinstance(v, dict):
            for x in v.values():
                walk(x)
        elif isinstance(v, list):
            for x in v:
                walk(x)

    walk(data)
    return out


def test_sidecar_holds_every_number_of_the_summary(study):
    result, html_path = study
    sidecar = json.loads(html_path.with_suffix(".json").read_text())
    assert sidecar["schema"] == "dpaudit.report-data" and len(sidecar["summary"]) == 3
    html = html_path.read_text(encoding="utf-8")
    table = html[html.index('id="summary-table"') : html.index("</table>", html.index('id="summary-table"'))]
    body = parse(table[table.index("<tbody>") :]).text
    known = _numbers(sidecar)
    shown = re.findall(r"\d+\.\d+e[-+]\d+|\d+\.\d+|\d+", body)
    assert len(shown) > 20
    missing = [n for n in shown if n not in known]
    assert not missing, missing
    gcn = next(r for r in sidecar["summary"] if r["defense"] == "gcn")
    assert f"{gcn['test_accuracy']:.3f}" in body
    assert "images" in json.dumps(sidecar) and "base64" not in json.dumps(sidecar)  # names, not payloads


def test_report_rerenders_without_retraining(study, capsys):
    result, html_path = study
    from dpaudit.app.cli import main

    before = {p: p.stat().st_mtime_ns for p in result.dir.rglob("*") if p.is_file() and "report" not in p.name}
    out = result.dir / "again.html"
    assert main(["report", str(result.dir), "--out", str(out)]) == 0
    assert "report:" in capsys.readouterr().out
    after = {
        p: p.stat().st_mtime_ns
        for p in result.dir.rglob("*")
        if p.is_file() and p.name not in {"again.html", "again.json"} and "report" not in p.name
    }  # noqa: E501
    assert before == after  # nothing trained or rewritten
    first = json.loads(html_path.with_suffix(".json").read_text())
    second = json.loads(out.with_suffix(".json").read_text())
    assert first["summary"] == second["summary"] and first["lower_bounds"] == second["lower_bounds"]


def test_broken_guarantee_is_flagged(study):
    """A claimed ε below an attack's proven lower bound is flagged in red, only when covered."""
    result, _ = study
    records = copy.deepcopy(result.done)
    private = next(r for r in records if r["privacy"]["unit"] == "node")
    attack = private["attacks"]["mia-threshold"]
    attack["covered_by_guarantee"] = True
    attack["epsilon_lower_bound"] = private["privacy"]["epsilon"] + 0.5  # a bound above the claim
    # ... whose pair-test counts still exceed it after Bonferroni (the report recomputes from them)
    attack["extra"]["lower_bound"] = {
        "counts": [{"fraction": 1.0, "guesses": 5000, "correct": 5000}],
        "pairs": 5000,
        "delta": 0.0,
        "group_size": 1,
    }
    data = build_report_data(records, result.report_meta())
    assert [(p["defense"], p["attack"]) for p in data["broken"]] == [(HOSTILE_DEFENSE, "mia-threshold")]
    html = render_html(data)
    assert 'id="broken-banner"' in html and '<tr class="broken ' in html
    attack["covered_by_guarantee"] = False  # an uncovered attack never breaks the guarantee
    assert build_report_data(records, result.report_meta())["broken"] == []
    # edges against non-edges are not units assigned at random: above the claim, but not "broken"
    attack["covered_by_guarantee"] = True
    attack["ceiling"] = {**attack["ceiling"], "attack_unit": "edge"}
    data = build_report_data(records, result.report_meta())
    assert data["broken"] == [] and len(data["exceeds_not_valid"]) == 1
    assert "not valid audits" in render_html(data)


def test_broken_needs_the_bound_to_survive_bonferroni_over_every_test(study):
    """Many seeds each at 95 % would flag a sound model by chance: a bound above the claim at
    95 % per test but not at 1 − 0.05/M is not "broken" once M tests are made."""
    from dpaudit.auditing.statistics import pair_test_from_counts

    result, _ = study
    base = next(r for r in result.done if r["privacy"]["unit"] == "node")
    claimed = base["privacy"]["epsilon"]
    pairs, copies = 400, 20

    def bound(correct, confidence):
        counts = [{"fraction": 1.0, "guesses": pairs, "correct": correct}]
        return pair_test_from_counts(counts, pairs, 0.0, 1, confidence)["epsilon"]

    # the correct-guess count whose bound exceeds the claim at 95 % but not at 1 − 0.05/M
    correct = next(v for v in range(pairs // 2, pairs + 1) if bound(v, 0.95) > claimed)
    assert bound(correct, 1 - 0.05 / copies) < claimed
    records = []
    for seed in range(copies):
        rec = copy.deepcopy(base)
        rec["seed"], rec["cell_id"] = seed, f"{rec.get('cell_id')}-{seed}"
        rec["attacks"] = {"mia-threshold": rec["attacks"]["mia-threshold"]}
        res = rec["attacks"]["mia-threshold"]
        res["epsilon_lower_bound"] = bound(correct, 0.95)
        res["extra"]["lower_bound"] = {
            "counts": [{"fraction": 1.0, "guesses": pairs, "correct": correct}],
            "pairs": pairs,
            "delta": 0.0,
            "group_size": 1,
        }
        records.append(rec)
    data = build_report_data(records, result.report_meta())
    assert data["multiple_testing"]["tests"] == copies and data["broken"] == []
    assert all(p["exceeds_claim"] and p["epsilon_lower_bound_bonferroni"] < claimed for p in data["lower_bounds"])
    assert data["verdicts"][0]["status"] == "consistent"
    one = build_report_data(records[:1], result.report_meta())  # a single test: 95 % is enough
    assert one["multiple_testing"]["tests"] == 1 and len(one["broken"]) == 1


def test_audit_validity_column_and_risk_slices(study):
    result, html_path = study
    html = html_path.read_text(encoding="utf-8")
    sidecar = json.loads(html_path.with_suffix(".json").read_text())
    table = html[html.index('id="summary-table"') : html.index("</table>", html.index('id="summary-table"'))]
    assert ">audit game</th>" in table and table.count('data-label="audit game"') == len(sidecar["summary"])
    for row in sidecar["summary"]:  # a random csbm split: mia-threshold is a valid game everywhere
        assert row["audit_validity"]["valid"] and "mia-threshold" in row["audit_validity"]["valid_attacks"]
        assert "embedding-probe" not in row["audit_validity"]["valid_attacks"]  # a diagnostic, never a bound
    # the column is about the game (a fair coin everywhere here), the verdict about the claim: the two
    # never use the same word, so a row cannot read "valid" beside "no valid audit"
    cells = [c.split("</td>")[0] for c in table.split('data-label="audit game">')[1:]]
    assert len(cells) == len(sidecar["summary"])
    for cell in cells:
        assert "fair coin" in parse(cell).text and "valid" not in parse(cell).text
    assert sidecar["risk_slices"] and '<section id="risk-slices">' in html
    first = sidecar["risk_slices"][0]
    assert first["attack"] == "mia-threshold" and {b["slice"] for b in first["class"]} == {"0", "1", "2"}
    records = copy.deepcopy(result.done)
    for rec in records:
        rec["attacks"]["mia-threshold"].update(bound_valid=False, bound_validity="members chosen by <hand>")
    data = build_report_data(records, result.report_meta())
    assert data["split_banner"]["reasons"] == ["members chosen by <hand>"]
    assert not any(row["audit_validity"]["valid"] for row in data["summary"])
    html = render_html(data)
    assert "members chosen by &lt;hand&gt;" in html[html.index('id="split-banner"') :]


@pytest.mark.parametrize("epsilon,delta", [(0.1, 0.0), (1.0, 1e-4), (4.0, 1e-3), (8.0, 1e-5)])
def test_auc_ceiling_matches_the_tradeoff_integral(epsilon, delta):
    """Closed form vs dpaudit.auditing.statistics vs numerically integrating the (ε, δ) trade-off curve."""
    alpha = np.linspace(0, 1, 200001)
    f = np.maximum.reduce(
        [np.zeros_like(alpha), 1 - delta - math.exp(epsilon) * alpha, math.exp(-epsilon) * (1 - delta - alpha)]
    )
    integral = 1 - np.trapezoid(f, alpha)
    assert auc_ceiling(epsilon, delta) == pytest.approx(integral, abs=1e-6)
    assert auc_ceiling is statistics_auc_ceiling  # one implementation, the report imports it
    assert auc_ceiling(None, delta) == 1.0


def test_report_path_must_not_be_the_sidecar(study, tmp_path):
    from dpaudit.app.outputs import OutputPathError

    result, _ = study
    with pytest.raises(OutputPathError, match="must not end in .json"):  # probed before any work
        result.to_html(tmp_path / "report.json")
    assert Path(result.to_html(tmp_path / "r.html")).exists() and (tmp_path / "r.json").exists()


@pytest.mark.parametrize(
    "svg",
    [
        '<svg xmlns="http://www.w3.org/2000/svg"><script>alert(1)</script></svg>',
        '<svg xmlns="http://www.w3.org/2000/svg"><g onload="alert(1)"/></svg>',
        '<svg xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink">'
        '<a xlink:href="javascript:alert(1)"/></svg>',
        '<svg xmlns="http://www.w3.org/2000/svg"><foreignObject/></svg>',
    ],
)
def test_active_svg_is_never_embedded(svg):
    from reports.figures import _assert_inert

    with pytest.raises(ValueError, match="active content"):
        _assert_inert(svg, "fig-test")


# --------------------------------------------------------------------------- verdict, banner, single-model audits


def _verdict_block(html: str, index: int = 1) -> str:
    start = html.index(f'id="verdict-{index}"')
    return html[start : html.index("</details>", start)]


def test_verdict_box_opens_the_report_with_the_right_numbers(study):
    result, html_path = study
    html = html_path.read_text(encoding="utf-8")
    sidecar = json.loads(html_path.with_suffix(".json").read_text())
    assert html.index('<section id="verdict">') < html.index('<section id="summary">')
    assert len(sidecar["verdicts"]) == len(sidecar["summary"]) == 3
    for i, (row, verdict) in enumerate(zip(sidecar["summary"], sidecar["verdicts"]), start=1):
        box = parse(_verdict_block(html, i)).text
        # a private model's card names only attacks its guarantee covers
        tests = {
            a: s
            for a, s in row["attacks"].items()
            if not s.get("diagnostic") and (row["unit"] is None or s["covered_by_guarantee"])
        }
        aucs = {a: s["auc"] for a, s in tests.items()}
        best = max(aucs, key=aucs.get)
        assert verdict["best_auc"]["attack"] == best and verdict["best_auc"]["auc"] == aucs[best]
        assert f"{aucs[best]:.3f} AUC by {best}" in box
        tprs = [s["tpr_at_1pct_fpr"] for s in tests.values() if s["tpr_at_1pct_fpr"] is not None]
        assert f"{max(tprs):.3f} by" in box
        if row["unit"] is None:
            assert verdict["status"] == "none" and "no guarantee" in box
            continue
        # the private model on a random csbm split: its node attacks are covered and valid audits
        valid = {
            a: s["epsilon_lower_bound_max"]
            for a, s in row["attacks"].items()
            if s["valid_audit"] and s["covered_by_guarantee"] and s["epsilon_lower_bound_max"] is not None
        }
        assert "mia-threshold" in valid
        attack = max(valid, key=valid.get)
        lb = valid[attack]
        assert (verdict["lower_bound"]["attack"], verdict["lower_bound"]["value"]) == (attack, lb)
        assert verdict["lower_bound"]["valid"] is True
        # one maximum per card: the bound repeats no maximum when its attack is the power line's
        same = verdict["power"] and verdict["power"]["attack"] == attack
        assert f"{lb:.3f} ({attack}{')' if same else '; at most'}" in box and "— tests the claim" in box
        claimed = row["epsilon_spent"]
        assert f"({claimed:.3f}, {row['delta']:.1e})-DP at the node level" in box
        # "consistent" only when the audit could have refuted the claim (its power above it)
        power = verdict["power"]["max_epsilon"]
        assert f"ε ≤ {power:.3f}" in box and f"{verdict['power']['pairs']} member/non-member pairs" in box
        assert verdict["status"] == ("broken" if lb > claimed else "consistent" if power > claimed else "underpowered")
        assert "what it covers" in box and "node membership" in box and "sound: true" in box
        assert 'id="split-banner"' not in html  # a random split: bounds are valid, no banner


def test_a_diagnostic_is_never_the_headline_attack():
    from types import SimpleNamespace as S

    attacks = {
        "embedding-probe": S(auc=0.99, diagnostic=True),
        "mia-threshold": S(auc=0.61, diagnostic=False),
        "mia-rmia": S(auc=0.74, diagnostic=False),
    }
    assert headline_attack(attacks) == "mia-rmia"
    assert headline_attack({"embedding-probe": S(auc=0.99, diagnostic=True)}) is None


def test_a_verdict_is_headlined_by_an_attack_its_guarantee_covers(study):
    """An edge attack the node-level guarantee does not cover (LinkTeller on a model whose
    inference reads the graph) may reach a high AUC: it is shown on the card, but the card of a
    guarantee that holds is headlined by the strongest attack the guarantee covers."""
    result, _ = study
    records = copy.deepcopy(result.done)
    private = next(r for r in records if r["privacy"]["unit"] == "node")
    uncovered = copy.deepcopy(private["attacks"]["mia-threshold"])
    uncovered.update(
        auc=0.97,
        auc_ci=[0.95, 0.99],
        covered_by_guarantee=False,
        epsilon_lower_bound=None,
        tpr_at_fpr={"0.01": 0.9},
        ceiling={"attack_unit": "edge", "reason": "inference is not private: edges are <exposed>"},
    )
    private["attacks"]["linkteller"] = uncovered
    data = build_report_data(records, result.report_meta())
    verdict = next(v for v in data["verdicts"] if v["claimed"]["unit"] == "node")
    assert verdict["status"] in ("consistent", "underpowered")  # not refuted; "consistent" needs power
    assert (
        verdict["best_auc"]["attack"] == "mia-threshold" and verdict["best_tpr_at_1pct_fpr"]["attack"] != "linkteller"
    )
    assert verdict["strongest_uncovered"] == {
        "attack": "linkteller",
        "auc": 0.97,
        "auc_ci": [0.95, 0.99],
        "below_chance": False,
        "why": "inference is not private: edges are <exposed>",
    }
    # the strongest leakage measured, covered or not, is named on the card
    assert verdict["strongest_leakage"]["attack"] == "linkteller" and verdict["strongest_leakage"]["covered"] is False
    html = render_html(data)
    index = data["verdicts"].index(verdict) + 1
    block = _verdict_block(html, index)
    summary = parse(block[: block.index("</summary>")]).text
    assert "not refuted" in summary or "consistent" in summary
    assert "0.970" not in summary and "audit could certify ε ≤" in summary
    box = parse(block).text
    assert f"strongest attack it covers{verdict['best_auc']['auc']:.3f} AUC by mia-threshold" in box
    assert "not covered0.970 AUC by linkteller" in box and "edges are <exposed>" in box
    assert "edges are &lt;exposed&gt;" in block
    # a model without a guarantee covers nothing: its strongest attack of any kind headlines it
    gcn = next(v for v in data["verdicts"] if v["defense"] == "gcn")
    assert gcn["best_auc"]["attack"] == "mia-threshold" and gcn["strongest_uncovered"] is None


def test_attacks_left_uncovered_for_one_reason_share_one_sentence(study):
    """A card lists the attacks its guarantee does not cover grouped by reason: the reason is
    written once, not repeated after every attack (a paper-protocol card has one reason for all)."""
    result, _ = study
    records = copy.deepcopy(result.done)
    private = next(r for r in records if r["privacy"]["unit"] == "node")
    reason = "the model's spec is <sound: false>"
    for name in ("linkteller", "link-steal"):
        extra = copy.deepcopy(private["attacks"]["mia-threshold"])
        extra.update(
            covered_by_guarantee=False, epsilon_lower_bound=None, ceiling={"attack_unit": "edge", "reason": reason}
        )
        private["attacks"][name] = extra
    data = build_report_data(records, result.report_meta())
    verdict = next(v for v in data["verdicts"] if v["claimed"]["unit"] == "node")
    block = _verdict_block(render_html(data), data["verdicts"].index(verdict) + 1)
    text = parse(block).text
    covers = text[text.index("what it covers") : text.index("soundness")]
    assert covers.count("<sound: false>") == 1, covers
    assert re.search(r"Not covered: [^.]*link-steal, linkteller \(the model's spec is <sound: false>\)", text), text


def test_node_group_counts_are_integers(study):
    result, html_path = study
    html = html_path.read_text(encoding="utf-8")
    section = html[html.index('<section id="risk-slices">') :]
    section = section[: section.index("</section>")]
    counts = re.findall(r'data-label="(?:non-)?members">([^<]*)<', section)
    assert counts and all(re.fullmatch(r"\d+", c) for c in counts), counts
    records = copy.deepcopy(result.done)
    slices = next(r for r in records if r["defense"] == "gcn")["attacks"]["mia-threshold"]["extra"]["risk_slices"]
    slices["class"][0].update(members=20.5, non_members=19.0)  # a mean over two runs that is not whole
    html = render_html(build_report_data(records, result.report_meta()))
    assert '<td data-label="members">20.5</td><td data-label="non-members">19</td>' in html


# --------------------------------------------------------------------------- figures: legible, hiding nothing

MIN_FIGURE_PT = 9  # about 11 px when a 4-inch panel is shown 384 px wide, as on a phone


def _drawn_figures(monkeypatch, make) -> list:
    """Every matplotlib figure ``make()`` draws for the report (caught at reports.figures.to_svg), laid out."""
    from reports import figures

    caught = []
    monkeypatch.setattr(figures, "to_svg", lambda fig, prefix: caught.append((prefix, fig)) or prefix)
    make()
    for _, fig in caught:
        fig.canvas.draw()
    return caught


def _texts(fig) -> list:
    """(text, window box) of every text the figure draws."""
    from matplotlib.text import Text

    renderer = fig.canvas.get_renderer()
    out = []
    for text in fig.findobj(Text):
        if text.get_visible() and text.get_text().strip():
            box = text.get_window_extent(renderer)
            if fig.bbox.overlaps(box):  # ticks beyond the view limits are laid out but never drawn
                out.append((text, box))
    return out


def _crowded_node_risk() -> dict:
    """Node risk with every degree bucket and three-digit counts: the labels that used to collide."""
    buckets = [
        (label, 100 + 7 * i, 110 + 5 * i) for i, label in enumerate(["0–1", "2–3", "4–7", "8–15", "16–31", "≥ 32"])
    ]
    return {
        "defense": "gcn",
        "epsilon": None,
        "seed": 0,
        "members": 700,
        "non_members": 750,
        "auc": 0.6,
        "histogram": {"edges": np.linspace(-3, 3, 21).tolist(), "members": [35] * 20, "non_members": [37] * 20},
        "fpr_level": 0.01,
        "threshold_at_fpr": 1.5,
        "most_exposed": [],
        "by_degree": [
            {"degree": d, "members": m, "non_members": n, "auc": 0.55, "tpr_at_fpr": 0.2} for d, m, n in buckets
        ],
    }


def test_figures_are_legible_and_legends_hide_no_data(study, monkeypatch):
    """Every figure of a study report (and node-risk panels with crowded degree buckets): no text
    under 9 pt, no two texts overlapping, and every legend outside the plotting area."""
    from reports.figures import render_all

    result, html_path = study
    data = json.loads(html_path.with_suffix(".json").read_text())
    data["node_risk"] = [_crowded_node_risk()]
    drawn = _drawn_figures(monkeypatch, lambda: render_all(data))
    names = [prefix for prefix, _ in drawn]
    assert any(n.startswith("fig-roc-") for n in names) and "fig-risk-degree-0" in names
    for prefix, fig in drawn:
        texts = _texts(fig)
        small = sorted({(t.get_text(), t.get_fontsize()) for t, _ in texts if t.get_fontsize() < MIN_FIGURE_PT})
        assert not small, (prefix, small)
        overlapping = [
            (a.get_text(), b.get_text())
            for (a, box_a), (b, box_b) in itertools.combinations(texts, 2)
            if box_a.overlaps(box_b)
        ]
        assert not overlapping, (prefix, overlapping)
        renderer = fig.canvas.get_renderer()
        legends = [*fig.legends, *(ax.get_legend() for ax in fig.axes if ax.get_legend())]
        for legend, ax in itertools.product(legends, fig.axes):
            assert not legend.get_window_extent(renderer).overlaps(ax.get_window_extent(renderer)), prefix
    assert all(fig.legends for prefix, fig in drawn if prefix.startswith("fig-roc-"))  # each ROC has its legend


def test_colour_captions_name_the_colours_drawn(study):
    """The caption's colour words come from the palette the figures draw with, and each word is
    what people call that colour (the xkcd colour survey's colour of that name, by hue)."""
    import colorsys

    import matplotlib.colors as mcolors

    from reports.figures import FAMILY_PALETTE, family_styles, palette_caption

    def hls(colour):
        return colorsys.rgb_to_hls(*mcolors.to_rgb(colour))

    hues = {}
    for family, (_, word) in FAMILY_PALETTE.items():
        drawn = hls(family_styles({"d": family})["d"]["color"])
        if word == "grey":
            assert drawn[2] < 0.05, family
            continue
        named = hls(f"xkcd:{word}")
        assert min(abs(drawn[0] - named[0]), 1 - abs(drawn[0] - named[0])) < 0.08, (family, word)
        hues[family] = drawn[0]
    for (a, hue_a), (b, hue_b) in itertools.combinations(hues.items(), 2):  # families are told apart
        assert min(abs(hue_a - hue_b), 1 - abs(hue_a - hue_b)) > 0.05, (a, b)
    families = {"gap-edp": "GAP", "gcn": "non-private baselines", "mlp-dp": "MLP-DP"}
    assert palette_caption(families) == "GAP blue, MLP-DP magenta, non-private baselines grey"
    result, html_path = study
    html = html_path.read_text(encoding="utf-8")
    sidecar = json.loads(html_path.with_suffix(".json").read_text())
    assert f"(colour family: {palette_caption(sidecar['families'])})" in parse(html).text


def test_embedding_images_have_a_colour_legend_and_show_at_their_size(monkeypatch):
    """A projection PNG carries a class → colour legend and is drawn at twice the pixels of the
    size the report shows it at, so it is never stretched (blurry) on a normal or dense screen."""
    import base64

    from matplotlib.figure import Figure

    from attacks.embedding import render_png
    from reports.render import image_size

    saved = []
    original = Figure.savefig
    monkeypatch.setattr(Figure, "savefig", lambda fig, *a, **k: saved.append(fig) or original(fig, *a, **k))
    rng = np.random.default_rng(0)
    labels = np.repeat([2, 0, 1], 20)
    png = render_png(rng.normal(size=(60, 2)), labels, "t-SNE of training embeddings")
    (fig,) = saved
    (legend,) = fig.legends
    assert [t.get_text() for t in legend.get_texts()] == ["class 0", "class 1", "class 2"]
    scatter = {c.get_label(): c.get_facecolor()[0].tolist() for c in fig.axes[0].collections}
    assert [h.get_facecolor()[0].tolist() for h in legend.legend_handles] == [scatter[f"class {c}"] for c in range(3)]
    assert len({tuple(v) for v in scatter.values()}) == 3
    head = base64.b64decode(png[:64])
    pixels = int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")
    shown = image_size(png)
    assert shown[0] == 384 and pixels == (2 * shown[0], 2 * shown[1])
    assert image_size("not an image") is None


def test_embedding_panels_are_captioned_for_people(study):
    result, html_path = study
    html = html_path.read_text(encoding="utf-8")
    section = html[html.index('<section id="embeddings">') :]
    section = section[: section.index("</section>")]
    text = parse(section).text
    assert "t-SNE of training embeddings, coloured by class" in text and "tsne.png" not in text
    images = [{k: v for _, k, v in parse(tag).attrs} for tag in re.findall(r"<img [^>]*>", section)]
    assert images and all(
        img["width"] == "384" and img["alt"].startswith("t-SNE of training embeddings") for img in images
    )


def test_public_split_banner_and_invalid_bounds(study):
    """Members fixed in advance (e.g. Cora's public split): every bound is flagged as not a valid
    audit, the banner says how to get valid ones, and nothing is called broken."""
    result, _ = study
    records = copy.deepcopy(result.done)
    for rec in records:
        rec["split"] = {**(rec.get("split") or {}), "spec": "public"}
        for res in rec["attacks"].values():
            res["epsilon_lower_bound"] = 50.0  # far above any claim
            res["covered_by_guarantee"] = True
    data = build_report_data(records, result.report_meta())
    assert data["split_banner"]["splits"] == ["public"] and data["broken"] == []
    private = next(v for v in data["verdicts"] if v["claimed"]["unit"] == "node")
    assert private["status"] == "not-auditable" and private["lower_bound"]["valid"] is False
    assert "'public' did not assign members at random" in private["lower_bound"]["why"]
    html = render_html(data)
    banner = html[html.index('id="split-banner"') :]
    banner = parse(banner[: banner.index("</div>")]).text
    assert "not valid audits" in banner and "--split random:0.75,0.1,0.15" in banner and "public" in banner
    assert "does not test the claim" in parse(_verdict_block(html, 1)).text
    assert 'id="broken-banner"' not in html


def test_unsound_paper_protocol_is_flagged_with_its_unaccounted_steps(study):
    result, _ = study
    records = copy.deepcopy(result.done)
    private = next(r for r in records if r["privacy"]["unit"] == "node")
    private["privacy"].update(sound=False, protocol="paper", unaccounted=["best-val checkpointing <on private data>"])
    html = render_html(build_report_data(records, result.report_meta()))
    assert 'id="unsound-banner"' in html and "protocol=paper" in html
    box = parse(_verdict_block(html, 1)).text
    assert "sound: false" in box and "protocol=paper" in box
    assert "best-val checkpointing <on private data>" in box  # listed, as escaped text
    assert "&lt;on private data&gt;" in html
    # a paper's unproven ε is a hypothesis the report tests, and still said to be the paper's
    assert "the paper's claim (its own accounting, protocol=paper): a hypothesis this audit tests" in box
    assert "The claimed ε is the paper's own analysis (protocol=paper): a hypothesis" in box
    assert "user's" not in box and "proven bound" in box and "covered by the guarantee" not in box
    banner = parse(html[html.index('id="unsound-banner"') :].split("</div>", 1)[0]).text
    assert f"{HOSTILE_DEFENSE} reports ε from a paper's own analysis" in banner  # one defense: singular
    second = {**copy.deepcopy(private), "defense": "second-dp", "cell_id": "second-dp-cell"}
    html = render_html(build_report_data([*records, second], result.report_meta()))
    banner = parse(html[html.index('id="unsound-banner"') :].split("</div>", 1)[0]).text
    assert f"{HOSTILE_DEFENSE} and second-dp report ε from" in banner  # two: joined with "and", plural
    from reports.render import and_list

    assert [and_list(n) for n in (["a"], ["a", "b"], ["a", "b", "c"])] == ["a", "a and b", "a, b and c"]


@pytest.fixture(scope="module")
def single_audit(tmp_path_factory):
    """One released gcn audited on its own: the report a single-model audit gets."""
    from dpaudit.app.pipeline import train

    out = tmp_path_factory.mktemp("audit")
    ds = csbm(num_nodes=200, num_classes=3, num_features=8, avg_degree=5, homophily=0.85, feature_signal=1.0, seed=3)
    trained = train("gcn", ds, epsilon="inf", seed=0, overrides={"epochs": 30}, out=out / "model")
    plans = []
    result = dpaudit.audit(
        trained.model,
        dataset=ds,
        attacks=["embedding-probe", "mia-threshold", "link-steal"],
        quick=True,
        settings={"embedding-probe": {"max_plot_nodes": 60}, "link-steal": {"max_pairs": 100}},
        progress=False,
        on_plan=plans.append,
    )
    assert plans == [result.plan]
    return result, result.to_html(out / "audit.html")


def test_single_model_audit_has_no_empty_panels(single_audit):
    result, html_path = single_audit
    html = html_path.read_text(encoding="utf-8")
    # strongest first, the plan made before any work, and its estimate
    assert [s["attack"] for s in result.plan["attacks"]] == ["link-steal", "mia-threshold", "embedding-probe"]
    assert result.plan["estimated_seconds"] > 0 and result.plan["quick"] is True
    assert result.results["link-steal"].settings["runs"] == 1  # the quick preset applied
    assert "of 1 models" not in html and "1 of 1 cells" not in html
    assert 'id="fig-overview"' in html  # one panel: a row per attack
    assert "fig-auc-" not in html  # no per-attack one-dot panels against ε
    assert 'id="utility-figure"' not in html and "fig-utility" not in html  # no one-dot utility plot
    assert html.count('class="figure-svg" id="fig-roc-') == 1  # one ROC panel, a curve per attack
    assert 'id="verdict-1" open' in html and 'id="attack-table"' in html
    sidecar = json.loads(html_path.with_suffix(".json").read_text())
    assert sidecar["single_model"] is True and len(sidecar["verdicts"]) == 1
    # each attack's CPU time beside its wall time (a loaded machine inflates only the latter)
    record = result.record()
    assert set(record["attack_cpu_seconds"]) == set(record["attack_seconds"]) == set(result.results)
    assert all(0 < cpu < 1e4 for cpu in record["attack_cpu_seconds"].values())


def test_node_risk_matches_the_threshold_attack(single_audit):
    """The per-node view reproduces mia-threshold's run 0 exactly (same nodes, same AUC)."""
    result, html_path = single_audit
    risk = result.node_risk
    # mia-threshold standardises within classes by default; node_risk shows the pooled score
    assert risk["auc"] == pytest.approx(result.results["mia-threshold"].runs[0]["auc_uncalibrated"], abs=1e-9)
    hist = risk["histogram"]
    assert sum(hist["members"]) == risk["members"] and sum(hist["non_members"]) == risk["non_members"]
    assert sum(b["members"] for b in risk["by_degree"]) == risk["members"]
    # the risk threshold flags 1 % of non-members, as every other TPR in the report (not 10 %)
    assert risk["fpr_level"] == 0.01 and "threshold_10pct_fpr" not in risk
    html = html_path.read_text(encoding="utf-8")
    assert "TPR@1 % FPR" in html and "10 % FPR" not in html
    scores = [n["score"] for n in risk["most_exposed"]]
    assert scores == sorted(scores, reverse=True) and len(scores) == 10
    html = html_path.read_text(encoding="utf-8")
    assert '<section id="node-risk">' in html and 'id="fig-risk-hist-0"' in html
    assert str(risk["most_exposed"][0]["node"]) in parse(html[html.index('id="node-risk"') :]).text


def test_interrupted_audit_keeps_what_finished(tmp_path):
    """Ctrl-C during an attack: the finished attacks are kept; the interrupted one and the rest are
    listed as not run."""
    import attacks as attack_registry
    from dpaudit.app.pipeline import train

    def interrupt(model, dataset=None, *, runs: int = 1):
        raise KeyboardInterrupt

    def never(model, dataset=None, *, runs: int = 1):
        raise AssertionError("ran after the interrupt")

    attack_registry.register_attack("zz-interrupt", {"runs": [COUNT]})(interrupt)
    attack_registry.register_attack("zz-never", {"runs": [COUNT]})(never)
    try:
        ds = csbm(num_nodes=120, num_classes=3, num_features=8, avg_degree=5, seed=4)
        model = train("mlp", ds, epsilon="inf", seed=0, overrides={"epochs": 5}).model
        result = dpaudit.audit(model, dataset=ds, attacks=["zz-interrupt", "mia-threshold", "zz-never"], progress=False)
    finally:
        for name in ("zz-interrupt", "zz-never"):
            attack_registry._ATTACKS.pop(name, None)
            attack_registry._CONSTRAINTS.pop(name, None)
    assert (
        result.interrupted
        and list(result.results) == ["mia-threshold"]
        and result.skipped == ["zz-interrupt", "zz-never"]
    )
    html = result.to_html(tmp_path / "a.html").read_text(encoding="utf-8")
    assert 'id="interrupted-banner"' in html and "zz-never" in html


def test_ctrl_c_returns_an_audit_without_waiting_for_compiled_code(tmp_path):
    """A real SIGINT while an attack sits in compiled code (LAPACK calls that check no signal,
    repeated until the test has its answer): the audit returns with the attack that had finished
    before those calls end (so the caller can write it at once; the abandoned calls end with the
    process). Asserted by order —
    the result is printed before the abandoned call writes its marker — not by a clock; the time
    to stop is measured by ``benchmarks/bench_interrupt.py``."""
    import os
    import signal
    import subprocess
    import sys
    import time

    script = tmp_path / "slow_audit.py"
    script.write_text(
        "import os, sys, json, numpy as np\n"
        "import attacks, dpaudit\n"
        "from dpaudit.data.datasets import csbm\n"
        "from dpaudit.app.pipeline import train\n"
        "from dpaudit.training.constraints import COUNT\n"
        "def slow(model, dataset=None, *, runs: int = 1):\n"
        "    print('SLOW', flush=True)\n"
        # compiled calls (no signal check) until the test says stop, so no load makes them end
        # first; the cap only turns a broken interrupt into a failure instead of a hang
        "    for _ in range(300):\n"
        f"        if os.path.exists({str(tmp_path / 'stop')!r}):\n"
        "            break\n"
        "        np.linalg.svd(np.random.default_rng(0).normal(size=(1500, 1500)))\n"
        f"    open({str(tmp_path / 'svd-finished')!r}, 'w').close()\n"
        "    raise AssertionError('not interrupted')\n"
        "attacks.register_attack('zz-slow', {'runs': [COUNT]})(slow)\n"
        "ds = csbm(num_nodes=120, num_classes=3, num_features=8, avg_degree=5, seed=4)\n"
        "model = train('mlp', ds, epsilon='inf', seed=0, overrides={'epochs': 5}).model\n"
        "r = dpaudit.audit(model, dataset=ds, attacks=['mia-threshold', 'zz-slow'], progress=False)\n"
        "print('RESULT', json.dumps({'interrupted': r.interrupted, 'done': list(r.results)}), flush=True)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2]), "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True, env=env)
    for line in proc.stdout:
        if line.startswith("SLOW"):
            break
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    result_line = next(line for line in proc.stdout if line.startswith("RESULT"))
    assert not (tmp_path / "svd-finished").exists()  # returned while the compiled call still ran
    (tmp_path / "stop").touch()  # let the abandoned call end
    proc.communicate(timeout=600)  # a hang guard: the abandoned LAPACK call may finish before the exit
    out = result_line
    payload = json.loads(out.split("RESULT ", 1)[1])
    assert payload == {"interrupted": True, "done": ["mia-threshold"]}


def test_default_plan_is_sized_from_a_calibrated_warm_shadow(single_audit):
    """The estimate repeats a warm shadow model's measured cost (a short timed trial of the
    target's recipe, not its cold recorded training time) once per shadow model; the defaults
    run LiRA with 4 shadows and TSTF with 3 runs, strongest first."""
    from dpaudit.app.workflows import audit_plan, format_plan

    result, _ = single_audit
    names = ["mia-threshold", "mia-tstf", "mia-lira", "link-steal"]
    plan = audit_plan(result.model, result.dataset, names, {})
    steps = {s["attack"]: s for s in plan["attacks"]}
    assert [s["attack"] for s in plan["attacks"]] == ["mia-lira", "mia-tstf", "link-steal", "mia-threshold"]
    assert steps["mia-lira"]["settings"]["num_shadows"] == 4 and steps["mia-lira"]["units"] == 4
    assert steps["mia-tstf"]["settings"]["runs"] == 3
    shadow = plan["shadow_seconds"]
    assert plan["costs"]["shadow_source"] == "trial" and shadow > 0
    assert steps["mia-lira"]["estimated_seconds"] >= 4 * shadow - 0.1
    assert plan["estimated_seconds"] == pytest.approx(sum(s["estimated_seconds"] for s in plan["attacks"]), abs=0.5)
    text = format_plan(plan)
    assert text.splitlines()[0].startswith("audit plan: 4 attack(s)") and "1. mia-lira" in text


def _with_design(res: dict, pairs: int, delta: float, group_size: int, correct: int | None = None) -> None:
    """Give a result a pair test of ``pairs`` pairs (``correct`` right guesses, all pairs guessed)."""
    from dpaudit.auditing.statistics import pair_test_from_counts

    correct = pairs // 2 if correct is None else correct
    counts = [{"fraction": 1.0, "guesses": pairs, "correct": correct}]
    res["extra"]["lower_bound"] = {"counts": counts, "pairs": pairs, "delta": delta, "group_size": group_size}
    res["epsilon_lower_bound"] = pair_test_from_counts(counts, pairs, delta, group_size)["epsilon"]


def test_consistent_only_from_an_audit_that_could_refute_the_claim(study):
    """A tiny audit "proves ε ≥ 0.00" whatever the model: it is not green "consistent" but "not
    refuted · audit too small", with the largest ε it could have certified; a large one is
    "consistent" and says how much it could have certified."""
    from dpaudit.auditing.statistics import pair_test_max_possible

    result, _ = study
    records = copy.deepcopy(result.done)
    private = next(r for r in records if r["privacy"]["unit"] == "node")
    claimed = private["privacy"]["epsilon"]
    res = private["attacks"]["mia-threshold"]
    _with_design(res, pairs=37, delta=1e-3, group_size=2)  # 74 negatives, as gap-ndp in the demo
    data = build_report_data(records, result.report_meta())
    verdict = next(v for v in data["verdicts"] if v["claimed"]["unit"] == "node")
    power = verdict["power"]["max_epsilon"]
    tests = data["multiple_testing"]["tests"]
    assert power == pytest.approx(pair_test_max_possible(37, 1e-3, 2, 1 - 0.05 / tests, fractions=(1.0,)))
    assert power < claimed and verdict["status"] == "underpowered" and verdict["power"]["enough"] is False
    html = render_html(data)
    index = data["verdicts"].index(verdict) + 1
    block = _verdict_block(html, index)
    assert "status-consistent" not in block and "consistent" not in parse(block).text
    text = parse(block).text
    assert f"could certify ε ≤ {power:.3f}" in text and "37 member/non-member pairs" in text
    assert "not above the claim" in text
    row = data["summary"][index - 1]
    assert row["attacks"]["mia-threshold"]["design"]["pairs"] == 37
    # a large audit with the same (null) result could have refuted the claim: consistent, with its power
    _with_design(res, pairs=5000, delta=0.0, group_size=1)
    data = build_report_data(records, result.report_meta())
    verdict = next(v for v in data["verdicts"] if v["claimed"]["unit"] == "node")
    assert verdict["status"] == "consistent" and verdict["power"]["max_epsilon"] > claimed
    html = render_html(data)
    table = html[html.index('id="summary-table"') :]
    table = table[: table.index("</table>")]
    for word in re.findall(r'status-consistent">([^<]*)<', html):
        assert f"audit could certify ε ≤ {verdict['power']['max_epsilon']:.3f}" in word, word
    assert "consistent (audit could certify ε ≤" in parse(table).text


def test_a_model_has_one_headline_auc(study):
    """The card and the summary row show the same headline AUC (the strongest attack the
    guarantee covers); a stronger attack outside the guarantee is named as such, never as the
    headline."""
    result, _ = study
    records = copy.deepcopy(result.done)
    private = next(r for r in records if r["privacy"]["unit"] == "node")
    uncovered = copy.deepcopy(private["attacks"]["mia-threshold"])
    uncovered.update(
        auc=0.988,
        auc_ci=[0.97, 0.99],
        covered_by_guarantee=False,
        epsilon_lower_bound=None,
        ceiling={"attack_unit": "edge", "reason": "inference reads the graph outside ε"},
    )
    private["attacks"]["linkteller"] = uncovered
    data = build_report_data(records, result.report_meta())
    html = render_html(data)
    headlines: dict[str, set] = {}
    for model, value in re.findall(r'class="[^"]*headline-auc[^"]*" data-model="([^"]*)">([^<]*)<', html):
        headlines.setdefault(model, set()).add(value)
    assert len(headlines) == len(data["summary"])
    assert all(len(values) == 1 for values in headlines.values()), headlines
    key = next(k for k in headlines if "0.988" not in headlines[k] and k.endswith(" 2"))
    assert headlines[key] != {"0.988"}
    assert "outside ε: linkteller, AUC 0.988" in parse(html[html.index('id="summary-table"') :]).text
    verdict = next(v for v in data["verdicts"] if v["claimed"]["unit"] == "node")
    assert verdict["strongest_leakage"] == {
        "attack": "linkteller",
        "auc": 0.988,
        "auc_ci": [0.97, 0.99],
        "below_chance": False,
        "covered": False,
    }
    block = parse(_verdict_block(html, data["verdicts"].index(verdict) + 1)).text
    assert "strongest leakage measuredAUC 0.988 by linkteller (outside the guarantee)" in block


def test_an_auc_below_chance_is_explained_where_it_is_shown(study):
    result, _ = study
    records = copy.deepcopy(result.done)
    gcn = next(r for r in records if r["defense"] == "gcn")
    gcn["attacks"]["mia-threshold"].update(auc=0.347, auc_ci=[0.30, 0.40])
    data = build_report_data(records, result.report_meta())
    row = next(r for r in data["summary"] if r["defense"] == "gcn")
    assert row["attacks"]["mia-threshold"]["below_chance"] is True
    html = render_html(data)
    verdict = next(v for v in data["verdicts"] if v["defense"] == "gcn")
    assert verdict["below_chance"] == ["mia-threshold"]
    block = parse(_verdict_block(html, data["verdicts"].index(verdict) + 1)).text
    assert "anti-correlated with membership" in block and "not leakage in the tested direction" in block
    assert "§ below chance" in html
    # an AUC near 0.5 is noise, not below chance
    gcn["attacks"]["mia-threshold"].update(auc=0.48, auc_ci=[0.40, 0.56])
    data = build_report_data(records, result.report_meta())
    assert not any(v["below_chance"] for v in data["verdicts"])


def test_a_model_without_a_guarantee_shows_no_soundness_and_no_delta(study):
    """gap-inf / gcn claim nothing: the ledger does not call them "sound: yes", nor the summary δ = 0."""
    result, _ = study
    data = build_report_data(copy.deepcopy(result.done), result.report_meta())
    html = render_html(data)
    ledgers = html[html.index('<section id="ledgers">') :]
    gcn = ledgers[ledgers.index("<b>gcn</b>") :]
    gcn = parse(gcn[: gcn.index("</details>")]).text
    assert "soundno guarantee" in gcn.replace("— ", "") and "soundyes" not in gcn
    table = html[html.index('id="summary-table"') :]
    gcn_row = table[table.index(">gcn</td>") :]
    gcn_row = gcn_row[: gcn_row.index("</tr>")]
    delta = gcn_row[gcn_row.index('data-label="δ">') :].split("</td>")[0]
    assert "0.0e+00" not in delta and "—" in delta


def test_the_verdict_section_opens_with_one_overall_line(study):
    result, _ = study
    records = copy.deepcopy(result.done)
    data = build_report_data(records, result.report_meta())
    overall = data["overall"]
    assert overall["status"] in ("consistent", "untested") and overall["counts"]["none"] == 2
    html = render_html(data)
    section = html[html.index('<section id="verdict">') :]
    assert section.index('id="overall-verdict"') < section.index('class="verdicts"')
    line = parse(section[section.index('id="overall-verdict"') :].split("</div>", 1)[0]).text
    assert "Overall:" in line and "2 without a guarantee" in line and "Strongest leakage measured: AUC" in line
    private = next(r for r in records if r["privacy"]["unit"] == "node")
    _with_design(private["attacks"]["mia-threshold"], pairs=5000, delta=0.0, group_size=1, correct=5000)
    data = build_report_data(records, result.report_meta())
    assert data["overall"]["status"] == "broken" and "Do not rely on the claimed ε" in data["overall"]["action"]


def test_audit_result_verdict_is_the_object_its_report_renders(single_audit):
    """``AuditResult.verdict`` is the typed verdict the report (and its JSON sidecar) shows."""
    from dpaudit.auditing.verdict import Verdict

    result, html_path = single_audit
    verdict = result.verdict
    assert isinstance(verdict, Verdict) and verdict.status == "none" and verdict.defense == "gcn"
    sidecar = json.loads(html_path.with_suffix(".json").read_text(encoding="utf-8"))
    assert sidecar["verdicts"] == [verdict.to_dict()]
    assert Verdict.from_dict(sidecar["verdicts"][0]) == verdict


def test_study_verdict_is_what_the_report_renders(study):
    """A study's ``.verdict`` (re-derived from its saved records) is the report's verdict data."""
    from dpaudit.app.workflows.study import StudyResult
    from dpaudit.auditing.verdict import StudyVerdict

    result, html_path = study
    sidecar = json.loads(html_path.with_suffix(".json").read_text(encoding="utf-8"))
    verdict = result.verdict
    assert isinstance(verdict, StudyVerdict)
    assert sidecar["verdicts"] == [v.to_dict() for v in verdict.models]
    assert sidecar["overall"] == verdict.overall.to_dict()
    # re-loaded from its folder, the study re-derives the same verdict
    assert StudyResult.load(html_path.parent).verdict == verdict

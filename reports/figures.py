"""Matplotlib figures of the report, rendered to inline SVG.

Every figure is drawn from :func:`reports.aggregate.build_report_data` output only. SVGs are
made embeddable: no XML prolog, no metadata, no namespace URLs, element ids prefixed per
figure (several SVGs share one HTML document), text kept as text. User-given labels are
passed through :func:`_label` so that ``$`` never switches matplotlib into math mode.
"""

from __future__ import annotations

import io
import math
import re
from xml.etree import ElementTree

import matplotlib
from markupsafe import Markup

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker  # noqa: E402
import numpy as np  # noqa: E402

from reports.aggregate import epsilon_label  # noqa: E402

COLORS = plt.get_cmap("tab20").colors[::2] + plt.get_cmap("tab20").colors[1::2]  # 10 strong, then 10 light
INF_FACTOR = 4.0  # ε = ∞ is drawn this factor to the right of the largest finite ε


def _label(text) -> str:
    """A user string made inert for matplotlib text (no mathtext)."""
    return str(text).replace("\\", "\\\\").replace("$", r"\$")


_ID = re.compile(r'(id="|url\(#|href="#)([^")]+)')
# Matplotlib XML-escapes every text it writes; an active element or attribute in its output
# would mean a label slipped through unescaped, so such an SVG is refused rather than embedded.
_ACTIVE_TAGS = {"script", "foreignobject", "iframe", "object", "embed"}


def _assert_inert(svg: str, prefix: str) -> None:
    for element in ElementTree.fromstring(svg).iter():
        tag = str(element.tag).rsplit("}", 1)[-1].lower()
        attributes = {k.rsplit("}", 1)[-1].lower(): v for k, v in element.attrib.items()}
        if (
            tag in _ACTIVE_TAGS
            or any(k.startswith("on") for k in attributes)
            or any("javascript:" in v.lower() for v in attributes.values())
        ):
            raise ValueError(f"figure {prefix}: SVG output contains active content; refusing to embed it")


def to_svg(fig, prefix: str) -> Markup:
    """Serialise ``fig`` to an SVG element for inline HTML (see the module docstring).

    The result is :class:`~markupsafe.Markup`: the one place where the report trusts markup it
    did not escape itself, after checking that it holds nothing active.
    """
    buf = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "dpaudit"}):
        fig.savefig(
            buf,
            format="svg",
            bbox_inches="tight",
            metadata={"Date": None, "Creator": None, "Format": None, "Type": None},
        )
    plt.close(fig)
    svg = buf.getvalue()
    svg = svg[svg.index("<svg") :]
    svg = re.sub(r"<metadata>.*?</metadata>", "", svg, flags=re.S)
    _assert_inert(svg, prefix)  # while the namespaces are still declared, so it parses as XML
    svg = re.sub(r'\s+xmlns(:\w+)?="[^"]*"', "", svg)
    svg = _ID.sub(lambda m: f"{m.group(1)}{prefix}-{m.group(2)}", svg)
    svg = svg.replace("<svg ", f'<svg role="img" class="figure-svg" id="{prefix}" ', 1)
    return Markup(svg)  # reviewed: matplotlib's XML-escaped SVG, checked inert above; prefixes are literals


def _x_positions(epsilons: list) -> tuple[dict, float | None, list[float]]:
    """Map ε → x (log axis); ε = ∞ (None) goes to the right edge."""
    finite = [e for e in epsilons if e is not None]
    inf_x = (max(finite) * INF_FACTOR) if finite else 1.0
    pos = {e: (inf_x if e is None else float(e)) for e in epsilons}
    return pos, inf_x if None in epsilons else None, finite


def _epsilon_axis(ax, epsilons: list) -> None:
    pos, inf_x, finite = _x_positions(epsilons)
    ax.set_xscale("log")
    ticks = sorted(set(pos.values()))
    ax.set_xticks(ticks)
    ax.set_xticklabels([epsilon_label(None if (inf_x is not None and t == inf_x) else t) for t in ticks])
    ax.minorticks_off()
    if inf_x is not None and finite:
        ax.axvline(math.sqrt(max(finite) * inf_x), color="0.6", lw=0.8, ls=":")
    lo = min(ticks) / 1.6
    hi = max(ticks) * 1.6
    ax.set_xlim(lo, hi)
    ax.set_xlabel("theoretical ε (target)")


PANEL = (4.0, 3.0)  # inches: about 384 px wide at 1:1, so one panel fills a phone with text of 9 pt or more
FONT = {
    "font.size": 9.5,
    "axes.titlesize": 10.5,
    "axes.labelsize": 9.5,
    "xtick.labelsize": 9,
    "ytick.labelsize": 9,
    "legend.fontsize": 9,
}

# One hue per defense family, shades within it; markers separate defenses of one family. Each
# family's colour word is kept next to its colour map: the report's captions name colours from
# this table (:func:`palette_caption`), so what a caption says is what a figure draws.
FAMILY_PALETTE = {
    "GAP": ("Blues", "blue"),
    "DPAR": ("Oranges", "orange"),
    "DP-GNN": ("Greens", "green"),
    "GCON": ("Purples", "purple"),
    "MLP-DP": ("RdPu", "magenta"),
    "non-private baselines": ("Greys", "grey"),
    "other": ("PuBuGn", "teal"),
}
MARKERS = "osD^vP"


def _palette(family: str) -> tuple[str, str]:
    return FAMILY_PALETTE.get(family, FAMILY_PALETTE["other"])


def family_styles(families: dict[str, str]) -> dict[str, dict]:
    """defense → {"color", "marker", "family"}: a family's defenses share a hue (dark to light)."""
    styles = {}
    for family in dict.fromkeys(families.values()):
        members = [d for d, f in families.items() if f == family]
        cmap = plt.get_cmap(_palette(family)[0])
        shades = np.linspace(0.85, 0.5, len(members)) if len(members) > 1 else [0.75]
        for i, (d, shade) in enumerate(zip(members, shades)):
            styles[d] = {"color": cmap(float(shade)), "marker": MARKERS[i % len(MARKERS)], "family": family}
    return styles


def palette_caption(families: dict[str, str]) -> str:
    """The colour of each family in ``families`` (defense → family), in the study's order with the
    non-private baselines (a reference in every panel) last:
    ``"GAP blue, MLP-DP magenta, non-private baselines grey"``."""
    ordered = sorted(dict.fromkeys(families.values()), key=lambda family: family == "non-private baselines")
    return ", ".join(f"{family} {_palette(family)[1]}" for family in ordered)


def _styles(data: dict) -> dict[str, dict]:
    from reports.aggregate import defense_family

    families = data.get("families") or {d: defense_family(d) for d in data["defenses"]}
    return family_styles({d: families.get(d, "other") for d in data["defenses"]})


BASELINES = "non-private baselines"


def _by_family(series_list: list[dict], styles: dict) -> list[tuple[str, list[dict]]]:
    """Group series into one panel per family. Non-private baselines have a point at ε = ∞ only,
    so instead of a one-dot panel of their own they join every other panel as a reference."""
    groups: dict[str, list] = {}
    for series in series_list:
        groups.setdefault(styles[series["defense"]]["family"], []).append(series)
    if BASELINES in groups and len(groups) > 1:
        refs = groups.pop(BASELINES)
        for family in groups:
            groups[family] = groups[family] + [{**r, "reference": True} for r in refs]
    return list(groups.items())


def _reference_line(ax, series: dict, ys: list[float], st: dict) -> None:
    if series.get("reference") and ys:
        ax.axhline(ys[-1], color=st["color"], lw=0.8, ls=":", zorder=1)


def _panel(size=PANEL):
    # constrained layout makes room for a legend placed outside the axes (:func:`_legend_below`)
    with matplotlib.rc_context(FONT):
        fig, ax = plt.subplots(figsize=size, layout="constrained")
    return fig, ax


LEGEND_ROW = 0.2  # inches: one row of legend text at FONT's legend size, with its spacing


def _legend_below(fig, ax) -> None:
    """The axes' legend under the plot, outside the data area, so that it never hides a curve or a
    point; the figure grows by the legend's height instead of the axes shrinking. Two columns when
    the labels are short enough to fit side by side in a panel."""
    handles, labels = ax.get_legend_handles_labels()
    if not handles:
        return
    columns = 2 if len(labels) > 1 and max(len(label) for label in labels) <= 20 else 1
    fig.set_figheight(fig.get_figheight() + LEGEND_ROW * math.ceil(len(labels) / columns))
    fig.legend(handles, labels, loc="outside lower center", ncol=columns, frameon=False)


def _powers_of_ten(ax) -> None:
    """Log-axis tick labels as plain text (10⁻⁴ … 1): mathtext would draw the exponents at 70 % of
    the tick size, too small to read on a phone."""
    superscript = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")

    def label(value, _position) -> str:
        exponent = round(math.log10(value)) if value > 0 else None
        if exponent is None or not math.isclose(value, 10.0**exponent):
            return ""
        return "1" if exponent == 0 else "10" + str(exponent).translate(superscript)

    for axis in (ax.xaxis, ax.yaxis):
        axis.set_major_formatter(matplotlib.ticker.FuncFormatter(label))
        axis.set_minor_formatter(matplotlib.ticker.NullFormatter())


def _ceiling(ax, ceiling) -> None:
    if not ceiling:
        return
    xs = np.asarray(ceiling["epsilon"])
    ys = np.asarray(ceiling["auc_max"])
    ax.fill_between(xs, ys, 1.02, color="0.85", hatch="//", edgecolor="0.7", lw=0, zorder=0)
    ax.plot(xs, ys, color="0.45", lw=1, zorder=1)
    # placed in axes coordinates: the ceiling's grid starts left of the visible ε range
    ax.text(
        0.02,
        0.98,
        f"impossible under (ε, δ={ceiling['delta']:.0e})-DP",
        fontsize=9,
        va="top",
        color="0.3",
        transform=ax.transAxes,
    )


def _one_panel(series_list: list[dict], styles: dict) -> list[tuple[None, list[dict]]]:
    """Every defense on one panel, grouped by family (non-private baselines last, drawn as
    references when private ones are there): one panel per attack instead of one per attack and
    family — a report of 11 models under 7 attacks drew 70 panels, most of its render time, for
    the same curves."""
    groups: dict[str, list] = {}
    for series in series_list:
        groups.setdefault(styles[series["defense"]]["family"], []).append(series)
    refs = groups.pop(BASELINES, [])
    flagged = [{**r, "reference": True} for r in refs] if groups else refs
    items = [item for group in groups.values() for item in group] + flagged
    return [(None, items)] if items else []


def auc_vs_epsilon(data: dict) -> list[dict]:
    """Attack AUC against target ε: per attack, one panel with every defense.

    Returns ``[{"attack", "note", "panels": [{"family", "svg"}]}]``; empty when the study has
    fewer than two ε values (then :func:`attack_overview` shows the results instead).
    """
    epsilons = data["epsilons"]
    if len(epsilons) < 2:
        return []
    pos, _, _ = _x_positions(epsilons)
    styles = _styles(data)
    out = []
    for k, panel in enumerate(data["headline"]):
        by_family = _one_panel(panel["series"], styles)
        note = ""
        if not panel["covered_anywhere"]:
            note = "not covered by any guarantee shown"
        elif not panel["valid_audit"]:
            note = "members not assigned at random: no DP ceiling applies"
        panels = []
        for j, (family, group) in enumerate(by_family):
            with matplotlib.rc_context(FONT):
                fig, ax = _panel()
                _epsilon_axis(ax, epsilons)
                _ceiling(ax, panel["ceiling"])
                ax.axhline(0.5, color="0.3", lw=0.8, ls="--", zorder=1)
                for series in group:
                    pts = sorted([p for p in series["points"] if p["auc"] is not None], key=lambda p: pos[p["epsilon"]])
                    if not pts:
                        continue
                    st = styles[series["defense"]]
                    xs = [pos[p["epsilon"]] for p in pts]
                    ys = [p["auc"] for p in pts]
                    lo = [p["auc_ci"][0] if p["auc_ci"][0] is not None else p["auc"] for p in pts]
                    hi = [p["auc_ci"][1] if p["auc_ci"][1] is not None else p["auc"] for p in pts]
                    uncovered = series["covered"] is False
                    _reference_line(ax, series, ys, st)
                    ax.fill_between(xs, lo, hi, color=st["color"], alpha=0.18, lw=0, zorder=2)
                    ax.plot(
                        xs,
                        ys,
                        marker="x" if uncovered else st["marker"],
                        ls="--" if uncovered else "-",
                        color=st["color"],
                        lw=1.6,
                        ms=5,
                        zorder=3,
                        label=_label(series["defense"]) + (" (not covered)" if uncovered else ""),
                    )
                ax.set_title(_label(panel["attack"]))
                ax.set_ylim(0.35, 1.02)
                ax.set_ylabel("attack AUC")
                _legend_below(fig, ax)
            panels.append({"family": family, "svg": to_svg(fig, f"fig-auc-{k}-{j}")})
        out.append({"attack": panel["attack"], "note": note, "panels": panels})
    return out


def attack_overview(data: dict) -> str | None:
    """One model (or one ε): every attack's AUC with its interval and, where it applies, the DP
    ceiling — one row per attack instead of one-dot panels."""
    rows = data["summary"]
    if not rows or len(data["epsilons"]) >= 2:
        return None
    attacks = [a for a in data["attacks"] if any(a in r["attacks"] for r in rows)]
    if not attacks:
        return None
    styles = _styles(data)
    n = len(rows)
    with matplotlib.rc_context(FONT):
        fig, ax = _panel((4.0, 1.0 + 0.42 * len(attacks) * max(1, min(n, 4))))
        step = 0.8 / max(n, 1)
        for i, row in enumerate(rows):
            st = styles[row["defense"]]
            for j, a in enumerate(attacks):
                s = row["attacks"].get(a)
                if not s or s["auc"] is None:
                    continue
                y = j + (i - (n - 1) / 2) * step
                lo, hi = s["auc_ci"]
                err = [
                    [s["auc"] - (lo if lo is not None else s["auc"])],
                    [(hi if hi is not None else s["auc"]) - s["auc"]],
                ]
                ax.errorbar(
                    [s["auc"]],
                    [y],
                    xerr=err,
                    fmt=st["marker"],
                    color=st["color"],
                    ms=6,
                    capsize=3,
                    label=_label(f"{row['defense']} ε={row['epsilon_label']}") if j == 0 else None,
                )
                if s["ceiling_auc"] is not None and s["valid_audit"] and s["covered_by_guarantee"]:
                    ax.plot([s["ceiling_auc"]] * 2, [y - 0.3, y + 0.3], color="#b00020", lw=2)
        ax.axvline(0.5, color="0.3", lw=0.8, ls="--")
        ax.set_yticks(range(len(attacks)))
        ax.set_yticklabels([_label(a) for a in attacks])
        ax.invert_yaxis()
        ax.set_xlim(0.3, 1.02)
        ax.set_xlabel("attack AUC (95 % interval)\ndashed: chance; red bar: DP ceiling where valid")
        if n > 1:
            _legend_below(fig, ax)
    return to_svg(fig, "fig-overview")


def privacy_utility(data: dict) -> list[dict]:
    """Test accuracy against ε, one panel per defense family (nothing for a single ε, or when no
    model has a test accuracy, e.g. adapted models)."""
    if len(data["epsilons"]) < 2:
        return []
    if not any(p["accuracy"] is not None for s in data["utility"] for p in s["points"]):
        return []
    epsilons = data["epsilons"]
    pos, _, _ = _x_positions(epsilons)
    styles = _styles(data)
    panels = []
    for j, (family, group) in enumerate(_by_family(data["utility"], styles)):
        with matplotlib.rc_context(FONT):
            fig, ax = _panel()
            _epsilon_axis(ax, epsilons)
            for series in group:
                pts = sorted(
                    [p for p in series["points"] if p["accuracy"] is not None], key=lambda p: pos[p["epsilon"]]
                )
                if not pts:
                    continue
                st = styles[series["defense"]]
                xs = [pos[p["epsilon"]] for p in pts]
                ys = [p["accuracy"] for p in pts]
                err = np.array(
                    [
                        [
                            y - (p["ci"][0] if p["ci"][0] is not None else y),
                            (p["ci"][1] if p["ci"][1] is not None else y) - y,
                        ]
                        for y, p in zip(ys, pts)
                    ]
                ).T
                _reference_line(ax, series, ys, st)
                ax.errorbar(
                    xs, ys, yerr=err, marker=st["marker"], capsize=3, color=st["color"], label=_label(series["defense"])
                )
            ax.set_ylabel("test accuracy")
            ax.set_ylim(0, 1.02)
            ax.set_title(f"Privacy–utility — {_label(family)}")
            _legend_below(fig, ax)
        panels.append({"family": family, "svg": to_svg(fig, f"fig-utility-{j}")})
    return panels


def roc_curves(data: dict) -> list[dict]:
    """Log–log ROC: per attack one panel, each defense at its strongest setting (non-private
    baselines dotted); a single model gets one panel with a curve per attack. Returns
    ``[{"attack", "panels": [{"family", "svg"}]}]``."""
    panels = [p for p in data["roc"] if p["curves"]]
    if not panels:
        return []
    styles = _styles(data)
    # the axes reach down to the smallest FPR the negatives resolve (1/negatives), never to an
    # FPR no curve can show; 1e-4 only for a result that recorded neither negatives nor an FPR
    floors = [p["fpr_floor"] for p in panels if p.get("fpr_floor")]
    floor = min(floors) if floors else 1e-4

    def axes_setup(fig, ax, title, floor=floor):
        grid = np.geomspace(floor, 1, 50)
        ax.plot(grid, grid, color="0.4", lw=0.8, ls="--", label="chance")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(floor, 1)
        ax.set_ylim(floor, 1.05)
        ax.set_xlabel("false positive rate")
        # room for browser fonts wider than matplotlib's: a pad of 8 left the y tick labels 9.8 px
        # clear in headless Chromium, and one CI run's font drew 10⁻¹ over the label
        ax.set_ylabel("true positive rate", labelpad=16)
        ax.set_title(title)
        _powers_of_ten(ax)
        _legend_below(fig, ax)

    if data.get("single_model") and len(data["summary"]) == 1:
        cmap = plt.get_cmap("tab10")
        with matplotlib.rc_context(FONT):
            fig, ax = _panel((4.0, 3.4))
            for i, p in enumerate(panels):
                c = p["curves"][0]
                fpr = np.clip(np.asarray(c["fpr"], dtype=float), floor, 1)
                tpr = np.clip(np.asarray(c["tpr"], dtype=float), floor, 1)
                ax.plot(
                    fpr,
                    tpr,
                    color=cmap(i % 10),
                    lw=1.4,
                    drawstyle="steps-post",
                    label=f"{_label(p['attack'])} (AUC {c['auc']:.3f})",
                )
            axes_setup(fig, ax, "ROC of every attack")
        return [{"attack": "all", "panels": [{"family": None, "svg": to_svg(fig, "fig-roc-0")}]}]
    out = []
    for k, panel in enumerate(panels):
        figures = []
        panel_floor = panel.get("fpr_floor") or floor
        for j, (family, group) in enumerate(_one_panel(panel["curves"], styles)):
            with matplotlib.rc_context(FONT):
                fig, ax = _panel((4.0, 3.4))
                for c in group:
                    st = styles[c["defense"]]
                    fpr = np.clip(np.asarray(c["fpr"], dtype=float), panel_floor, 1)
                    tpr = np.clip(np.asarray(c["tpr"], dtype=float), panel_floor, 1)
                    ax.plot(
                        fpr,
                        tpr,
                        color=st["color"],
                        lw=1.3,
                        drawstyle="steps-post",
                        ls=":" if c.get("reference") else "-",
                        label=f"{_label(c['defense'])} ε={epsilon_label(c['epsilon'])}",
                    )
                axes_setup(fig, ax, f"ROC — {_label(panel['attack'])}", panel_floor)
            figures.append({"family": family, "svg": to_svg(fig, f"fig-roc-{k}-{j}")})
        out.append({"attack": panel["attack"], "panels": figures})
    return out


def lower_bounds(data: dict) -> str | None:
    """Empirical ε lower bound against the accounted ε.

    Filled red: above the claim in a valid audit (a broken guarantee). Hollow orange: above the
    claim, but not a valid audit (members not assigned at random). Hollow grey: at or below
    the claim. Grey ×: the guarantee does not cover the attack's unit (no claim to test).
    """
    pts = [p for p in data["lower_bounds"] if p["claimed_epsilon"] is not None]
    if not pts or not ((data.get("charts") or {}).get("lower_bounds") or {"drawn": True})["drawn"]:
        return None
    with matplotlib.rc_context(FONT):
        fig, ax = _panel((4.0, 3.6))
        top = max(max(p["claimed_epsilon"] for p in pts), max(p["epsilon_lower_bound"] for p in pts), 1.0) * 1.15
        ax.plot([0, top], [0, top], color="0.3", lw=1, ls="--", label="lower bound = claimed ε")
        ax.fill_between(
            [0, top],
            [0, top],
            top,
            color="#fde0e0",
            lw=0,
            zorder=0,
            label="above the claim (broken if the audit is valid)",
        )
        groups = [
            ([p for p in pts if p["broken"]], {"color": "#d00000"}, "valid audit above the claim — BROKEN"),
            (
                [p for p in pts if p["exceeds_claim"] and not p["broken"]],
                {"facecolor": "none", "edgecolor": "#c77700", "linewidths": 1.5},
                "above, but not a valid audit",
            ),
            (
                [p for p in pts if p["covered"] and not p["exceeds_claim"]],
                {"facecolor": "none", "edgecolor": "0.25"},
                "at or below the claim",
            ),
            (
                [p for p in pts if not p["covered"]],
                {"color": "0.55", "marker": "x"},
                "unit not covered (no claim to test)",
            ),
        ]
        for sub, style, label in groups:
            if sub:
                style = {"marker": "o", **style}
                ax.scatter(
                    [p["claimed_epsilon"] for p in sub],
                    [p["epsilon_lower_bound"] for p in sub],
                    s=28,
                    label=label,
                    zorder=3,
                    **style,
                )
        ax.set_xlim(0, top)
        ax.set_ylim(0, top)
        ax.set_xlabel("claimed (accounted) ε")
        ax.set_ylabel("empirical ε lower bound")
        ax.set_title("ε lower bounds against claimed ε")
        _legend_below(fig, ax)
    return to_svg(fig, "fig-lower-bounds")


def risk_figures(risk: dict, index: int) -> dict[str, str]:
    """Score histogram (members vs non-members) and AUC / TPR by degree bucket of one model."""
    out = {}
    hist = risk["histogram"]
    edges = np.asarray(hist["edges"])
    width = np.diff(edges)
    with matplotlib.rc_context(FONT):
        fig, ax = _panel()
        ax.bar(
            edges[:-1],
            hist["non_members"],
            width=width,
            align="edge",
            color="#4c78a8",
            alpha=0.6,
            label=f"non-members ({risk['non_members']})",
        )
        ax.bar(
            edges[:-1],
            hist["members"],
            width=width,
            align="edge",
            color="#e45756",
            alpha=0.6,
            label=f"members ({risk['members']})",
        )
        level = f"{100 * risk.get('fpr_level', 0.01):g} %"
        if risk.get("threshold_at_fpr") is not None and math.isfinite(risk["threshold_at_fpr"]):
            ax.axvline(risk["threshold_at_fpr"], color="0.2", ls="--", lw=0.9, label=f"threshold at {level} FPR")
        ax.set_xlabel("score: logit p_y(v) (higher = member)")
        ax.set_ylabel("nodes")
        ax.set_title("Membership scores (mia-threshold)")
        _legend_below(fig, ax)
    out["histogram"] = to_svg(fig, f"fig-risk-hist-{index}")
    buckets = [b for b in risk["by_degree"] if b["auc"] is not None or b.get("tpr_at_fpr") is not None]
    if buckets:
        with matplotlib.rc_context(FONT):
            fig, ax = _panel()
            # horizontal bars: a bucket's label (range and counts) sits on one line of its own row,
            # so labels cannot run into each other however many buckets or digits there are
            y = np.arange(len(buckets))
            aucs = [b["auc"] if b["auc"] is not None else np.nan for b in buckets]
            tprs = [b["tpr_at_fpr"] if b.get("tpr_at_fpr") is not None else np.nan for b in buckets]
            ax.barh(y - 0.2, aucs, height=0.4, color="#e45756", label="AUC in bucket")
            ax.barh(y + 0.2, tprs, height=0.4, color="#72b7b2", label=f"TPR at {level} FPR")
            ax.axvline(0.5, color="0.3", lw=0.8, ls="--")
            ax.set_yticks(y)
            ax.set_yticklabels([f"{b['degree']} ({b['members']}/{b['non_members']})" for b in buckets])
            ax.invert_yaxis()
            ax.set_ylabel("degree (members/non-members)")
            ax.set_xlim(0, 1.05)
            ax.set_title("Risk by degree")
            _legend_below(fig, ax)
        out["degree"] = to_svg(fig, f"fig-risk-degree-{index}")
    return out


def render_all(data: dict) -> dict:
    return {
        "auc": auc_vs_epsilon(data),
        "overview": attack_overview(data),
        "utility": privacy_utility(data),
        "roc": roc_curves(data),
        "lower_bounds": lower_bounds(data),
        "canaries": canary_bounds(data),
        "risk": [risk_figures(r, i) for i, r in enumerate(data.get("node_risk") or [])],
    }


def canary_bounds(data: dict) -> str | None:
    """Canary audits: claimed ε against the canary ε lower bound, one marker per (cell, kind).

    The region above the diagonal is impossible while the guarantee holds. Filled: the
    certified bound (one-run / one-run-fdp / multi-run, 95 % after Bonferroni); a thin line joins it to the
    overall bound when the GDP estimate is higher (an estimate, valid for Gaussian-shaped
    trade-off curves). Circles: node canaries, squares: edge canaries; red: certified above
    the claim (broken); grey ×: the canary game is not covered by the defense's unit.
    """
    pts = [p for p in data.get("canaries") or [] if p["claimed_epsilon"] is not None and p["certified"] is not None]
    if not pts or not ((data.get("charts") or {}).get("canaries") or {"drawn": True})["drawn"]:
        return None
    with matplotlib.rc_context(FONT):
        fig, ax = _panel((4.0, 3.6))
        top = max(max(p["claimed_epsilon"] for p in pts), max(p["overall"] or 0 for p in pts), 1.0) * 1.15
        ax.plot([0, top], [0, top], color="0.3", lw=1, ls="--", label="ε lower bound = claimed ε")
        ax.fill_between(
            [0, top], [0, top], top, color="#fde0e0", lw=0, zorder=0, label="impossible if the guarantee holds"
        )
        seen = set()
        for p in pts:
            marker = "o" if p["kind"] == "node" else "s"
            if not p["bound_valid"]:
                style, label = {"color": "0.55", "marker": "x"}, "not covered by the unit"
            elif p["broken"]:
                style, label = {"color": "#d00000", "marker": marker}, f"{p['kind']} canaries: broken"
            else:
                style, label = {"color": "0.25", "marker": marker}, f"{p['kind']} canaries: certified bound"
            x = p["claimed_epsilon"]
            if p["overall"] is not None and p["overall"] > p["certified"]:
                ax.plot([x, x], [p["certified"], min(p["overall"], top)], color=style["color"], lw=0.8, alpha=0.6)
            ax.scatter(
                [x], [p["certified"]], s=30, zorder=3, clip_on=False, label=None if label in seen else label, **style
            )
            seen.add(label)
        ax.set_xlim(0, top)
        ax.set_ylim(-0.03 * top, top)
        ax.set_xlabel("claimed ε (spent; ×2 for edge canaries on node-level DP)")
        ax.set_ylabel("canary ε lower bound")
        ax.set_title("Canary audits: ε lower bound against claimed ε")
        _legend_below(fig, ax)
    return to_svg(fig, "fig-canaries")

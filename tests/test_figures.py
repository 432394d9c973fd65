"""The figures of every report, looked at as drawn (issue 36, item 7): built from real small studies (a replicate
study of tiny, `das metrics` of one tiny release, `das attack` of it, a tiny `das compare`), each figure caught as
it is saved and checked on its matplotlib Figure: no text cut off, no overlapping tick labels, legend colours that
are the series', zero bars visible, Match-Rate plotted as AttackResult pools it, the uncertainty convention stated."""

from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.colors  # noqa: E402
import matplotlib.figure  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from conftest import ROOT  # noqa: E402
from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: E402
from matplotlib.container import BarContainer  # noqa: E402

TINY_PERSONS = ROOT / "geography_fixtures" / "tiny" / "persons.parquet"
CONVENTIONS = ("Uncertainty: bars +-2 standard errors", "Uncertainty: Wilson score intervals at z = 2",
               "Uncertainty: none drawn (")


class Drawn:
    """Every Figure saved while it is open, by file name (the files are written as usual)."""

    def __init__(self, monkeypatch, base: Path):
        self.figures: dict[str, matplotlib.figure.Figure] = {}
        original = matplotlib.figure.Figure.savefig

        def recording(fig, path, *args, **kwargs):
            self.figures[str(Path(path).relative_to(base))] = fig
            return original(fig, path, *args, **kwargs)

        monkeypatch.setattr(matplotlib.figure.Figure, "savefig", recording)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The figures of four real reports, and the attacks' results (one geounit and three)."""
    from das.attack.command import AttackConfig, run_attack
    from das.driver.run import run
    from das.research.compare import Comparison, run_comparison
    from das.research.evaluate import evaluate_run
    from das.research.replicate import Study, replicate_study
    from das.research.report import build_report

    tmp = tmp_path_factory.mktemp("figures")
    with pytest.MonkeyPatch.context() as patch:
        drawn = Drawn(patch, tmp)
        replicate_study(Study("tiny", runs=2, seed=1), tmp / "study", workers=1)
        build_report(tmp / "study")
        release = run("tiny", tmp / "run", seed=1, workers=1, progress=False).out_dir
        evaluate_run(release, out=tmp / "metrics")
        build_report(tmp / "metrics")
        attacks = {n: run_attack(AttackConfig(truth=TINY_PERSONS, published=release, out=tmp / f"attack{n}", count=n,
                                              runs=2, relaxed=50, steps=20, ip_top=0)) for n in (1, 3)}
        run_comparison(Comparison(spec="tiny", seeds=1, attack_blocks=2, attack_runs=1, attack_relaxed=30,
                                  attack_steps=20), tmp / "compare")
    assert {name.split("/")[0] for name in drawn.figures} == {"study", "metrics", "attack1", "attack3", "compare"}
    for fig in drawn.figures.values():
        FigureCanvasAgg(fig).draw()  # closed (pyplot dropped its canvas): laid out again as saved
    return drawn.figures, attacks, tmp


def _renderer(fig):
    return fig.canvas.get_renderer()


def _drawn_tick_labels(ax, axis):
    """The tick labels of `axis` ("x" or "y") that are drawn: visible, written, and within the axes' view."""
    labels = ax.get_xticklabels() if axis == "x" else ax.get_yticklabels()
    low, high = sorted(ax.get_xlim() if axis == "x" else ax.get_ylim())
    slack = 1e-9 * (high - low)
    return [t for t in labels if t.get_visible() and t.get_text()
            and low - slack <= t.get_position()[0 if axis == "x" else 1] <= high + slack]


def _texts(fig):
    """Every text the figure draws: its title, legends, and each visible axes' titles, labels, tick labels, notes."""
    texts = [fig._suptitle] if fig._suptitle else []
    legends = list(fig.legends)
    for ax in fig.axes:
        if not ax.get_visible():
            continue
        texts += [ax.title, ax.xaxis.label, ax.yaxis.label, *ax.texts, *_drawn_tick_labels(ax, "x"),
                  *_drawn_tick_labels(ax, "y")]
        legends += [ax.get_legend()] if ax.get_legend() else []
    texts += [t for legend in legends for t in legend.get_texts()]
    return [t for t in texts if t.get_visible() and t.get_text()]


def test_no_text_is_cut_off(built):
    figures, *_ = built
    cut = []
    for name, fig in figures.items():
        renderer, box = _renderer(fig), fig.bbox
        for text in _texts(fig):
            extent = text.get_window_extent(renderer)
            if extent.x0 < box.x0 - 1 or extent.x1 > box.x1 + 1 or extent.y0 < box.y0 - 1 or extent.y1 > box.y1 + 1:
                cut.append(f"{name}: {text.get_text()[:60]!r}")
    assert cut == []


def test_no_two_tick_labels_of_an_axis_overlap(built):
    figures, *_ = built
    overlapping = []
    for name, fig in figures.items():
        renderer = _renderer(fig)
        for ax in [ax for ax in fig.axes if ax.get_visible()]:
            for axis in ("x", "y"):
                boxes = [t.get_window_extent(renderer) for t in _drawn_tick_labels(ax, axis)]
                gap = fig.dpi / 72  # 1 point apart at least: labels that touch read as one
                overlapping += [f"{name} {ax.get_title()!r} {axis}: {a} {b}" for i, a in enumerate(boxes)
                                for b in boxes[i + 1:] if min(a.x1, b.x1) - max(a.x0, b.x0) > -gap
                                and min(a.y1, b.y1) - max(a.y0, b.y0) > -gap]
    assert overlapping == []


def _colour(artist):
    if isinstance(artist, matplotlib.lines.Line2D):
        return matplotlib.colors.to_rgba(artist.get_color(), artist.get_alpha())
    face = tuple(artist.get_facecolor())
    return face if face[3] > 0 else tuple(artist.get_edgecolor())  # a step histogram: its outline


def test_each_legend_entry_has_the_colour_of_the_series_it_names(built):
    figures, *_ = built
    wrong, checked = [], 0
    for name, fig in figures.items():
        legends = [*fig.legends, *(ax.get_legend() for ax in fig.axes if ax.get_legend())]
        series = [(line.get_label(), _colour(line)) for ax in fig.axes for line in ax.get_lines()]
        series += [(c.get_label(), _colour(patch)) for ax in fig.axes for c in ax.containers
                   if isinstance(c, BarContainer) for patch in c.patches]
        series += [(patch.get_label(), _colour(patch)) for ax in fig.axes for patch in ax.patches]  # histograms
        for legend in legends:
            for handle, text in zip(legend.legend_handles, legend.get_texts()):
                named = [colour for label, colour in series if label == text.get_text()]
                assert named, f"{name}: legend entry {text.get_text()!r} names no series"
                wrong += [f"{name}: {text.get_text()!r}" for colour in named if not np.allclose(colour, _colour(handle))]
                checked += 1
    assert wrong == [] and checked > 30


def test_a_bar_of_exactly_zero_is_drawn_visibly(built):
    figures, *_ = built
    zeros, missing = 0, []
    for name, fig in figures.items():
        for ax in fig.axes:
            for container in [c for c in ax.containers if isinstance(c, BarContainer)]:
                for patch in container.patches:
                    if not (np.isfinite(patch.get_height()) and abs(patch.get_height()) < 1e-9):
                        continue
                    zeros += 1
                    centre = patch.get_x() + patch.get_width() / 2
                    marks = [line for line in ax.get_lines() if line.get_linewidth() >= 2
                             and np.allclose(np.asarray(line.get_ydata(), float), 0)
                             and min(line.get_xdata()) < centre < max(line.get_xdata())
                             and np.allclose(_colour(line)[:3], patch.get_facecolor()[:3])]
                    if not marks:
                        missing.append(f"{name} {ax.get_title()!r} at x = {centre:.2f}")
    assert zeros >= 3 and missing == []  # the one release's and the comparison's zero bars, each visible


def _curve(fig, panel: int, label: str):
    (line,) = [line for line in fig.axes[panel].get_lines() if line.get_label().startswith(label)]
    return np.asarray(line.get_xdata(), float), np.asarray(line.get_ydata(), float), line


def _band_at(fig, panel: int, colour, x: float) -> tuple[float, float]:
    """The band's (low, high) at x: the vertical extent of the fill of that colour at x."""
    (band,) = [c for c in fig.axes[panel].collections if np.allclose(c.get_facecolor()[0][:3], colour[:3])]
    vertices = band.get_paths()[0].vertices
    ys = [y for xv, y in vertices if np.isclose(xv, x)]
    return min(ys), max(ys)


def _wilson(p: float, trials: float, z: float = 2.0) -> tuple[float, float]:
    """The Wilson score interval of a share p of `trials` at z standard errors (written here from its formula)."""
    centre = (p + z * z / (2 * trials)) / (1 + z * z / trials)
    half = z / (1 + z * z / trials) * np.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials))
    return max(0.0, centre - half), min(1.0, centre + half)


def test_the_comparison_attack_bars_are_pooled_with_wilson_intervals(built):
    import pandas as pd

    from das.research import series

    figures, _, tmp = built
    fig = figures["compare/report/attack.png"]
    attack = pd.read_parquet(tmp / "compare" / "attack.parquet")
    rap = attack[attack["method"] == "rap_rank"].groupby("mechanism")[["hits_at_u", "u"]].sum()
    ax = fig.axes[0]
    checked = 0
    for container in [c for c in ax.containers if isinstance(c, BarContainer)]:
        mechanism = {series.label(m): m for m in rap.index}[container.get_label()]
        hits, asked = rap.loc[mechanism]
        assert container.patches[0].get_height() == pytest.approx(hits / asked)
        (segment,) = container.errorbar.lines[2][0].get_segments()
        assert sorted(segment[:, 1]) == pytest.approx(_wilson(hits / asked, asked))
        checked += 1
    assert checked == len(rap) == 2  # TopDown's release and the exact tables


def test_match_rate_is_plotted_as_attack_result_pools_it(built):
    figures, attacks, _ = built
    for n, result in attacks.items():
        fig = figures[f"attack{n}/match_rate.png"]
        assert all("Match-Rate" in ax.get_ylabel() for ax in fig.axes)
        k, rate, _ = _curve(fig, 0, "RAP-Rank")
        for asked in (1, 5, 10):
            assert rate[list(k).index(asked)] == pytest.approx(result.match_rate["rap_rank"][asked], abs=1e-12)
        fractions, rate, _ = _curve(fig, 1, "RAP-Rank")
        for f in (0.5, 1.0):
            assert rate[np.flatnonzero(np.isclose(fractions, f))[0]] == pytest.approx(
                result.match_rate_k_over_u["rap_rank"][f], abs=1e-12)


def test_match_rate_bands_are_wilson_intervals_at_two_standard_errors_even_for_one_geounit(built):
    figures, attacks, _ = built
    for n, result in attacks.items():
        fig = figures[f"attack{n}/match_rate.png"]
        _, _, line = _curve(fig, 0, "RAP-Rank")
        # the band at k = 1 is the Wilson interval at z = 2 of the pooled hits over the n candidates asked
        low, high = _band_at(fig, 0, matplotlib.colors.to_rgba(line.get_color()), 1.0)
        assert (low, high) == pytest.approx(_wilson(result.match_rate["rap_rank"][1], n), abs=1e-9)
        assert high - low > 0.3  # one geounit's (or three's) rate is far from known: the band says so


def test_the_three_geounits_mean_rate_is_not_their_pooled_rate(built):
    """What makes the test above able to fail: over these geounits (of different u) the mean of the per-geounit
    Match-Rate@u (match_rate.csv) is another number than the pooled one."""
    import pandas as pd

    _, attacks, _ = built
    curves = pd.read_csv(attacks[3].out / "match_rate.csv", dtype={"geocode": str})
    at_u = curves[(curves["method"] == "rap_rank") & np.isclose(curves["k_over_u"], 1.0)]
    assert len(at_u) == 3 and abs(at_u["match_rate"].mean() - attacks[3].match_rate_k_over_u["rap_rank"][1.0]) > 0.01


def test_every_figure_states_its_uncertainty_convention(built):
    figures, *_ = built
    unstated = [name for name, fig in figures.items()
                if not any(c in fig.get_suptitle().replace("\n", " ") for c in CONVENTIONS)]
    assert unstated == [] and len(figures) >= 20

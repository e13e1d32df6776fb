#!/usr/bin/python3
"""Draw the figures of a nicflow experiment run.

Usage: /usr/bin/python3 scripts/plot.py RUN_DIR/figures.json [OUT_DIR]

figures.json is a list of figures written by `nicflow bench <experiment>`
(crates/bench/src/report.rs): each has an id (file stem), a title,
x and y axis labels with units, whether the x axis is logarithmic, and one
series per engine with (x, y) points (y null where the engine has no value).
One PNG per figure, one line per engine, is written to OUT_DIR (default:
the directory of figures.json); the paths written are printed, one per line.

Use the system Python (/usr/bin/python3, with python3-matplotlib), not a
pyenv python3 that may lack matplotlib.
"""

import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import ScalarFormatter  # noqa: E402

MARKERS = ["o", "s", "^", "D", "v", "P", "X", "*"]


def draw(fig_spec, out_dir):
    fig, ax = plt.subplots(figsize=(6.4, 4.2), dpi=120)
    xs_all = set()
    for i, s in enumerate(fig_spec["series"]):
        pts = [(x, y) for x, y in s["points"] if y is not None]
        if not pts:
            continue
        pts.sort()
        xs_all.update(x for x, _ in pts)
        ax.plot(
            [p[0] for p in pts],
            [p[1] for p in pts],
            marker=MARKERS[i % len(MARKERS)],
            label=s["name"],
        )
    if fig_spec.get("log_x"):
        ax.set_xscale("log")
        ax.xaxis.set_major_formatter(ScalarFormatter())
        ax.set_xticks(sorted(xs_all))
        ax.minorticks_off()
    elif xs_all:
        ax.set_xticks(sorted(xs_all))
    ax.set_xlabel(fig_spec["x_label"])
    ax.set_ylabel(fig_spec["y_label"])
    ax.set_title(fig_spec["title"], fontsize=10)
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path = os.path.join(out_dir, fig_spec["id"] + ".png")
    fig.savefig(path)
    plt.close(fig)
    return path


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    src = sys.argv[1]
    out_dir = sys.argv[2] if len(sys.argv) > 2 else os.path.dirname(src) or "."
    with open(src) as f:
        figures = json.load(f)
    for spec in figures:
        print(draw(spec, out_dir))


if __name__ == "__main__":
    main()

"""Draw the figures of bench/results/journal.md from bench/results/*.json, as plain SVG (no plotting
library needed).

    python bench/plot.py
"""

import json
from pathlib import Path
from xml.sax.saxutils import escape

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"
OUT = REPO / "docs" / "img"
WIDTH, HEIGHT, LEFT, BOTTOM, TOP = 560, 300, 60, 40, 30
COLOURS = ["#4c72b0", "#dd8452", "#55a868", "#c44e52"]


def _svg(title, body, y_label):
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" font-family="sans-serif" '
            f'font-size="12"><rect width="100%" height="100%" fill="white"/>'
            f'<text x="{WIDTH / 2}" y="18" text-anchor="middle" font-size="14">{escape(title)}</text>'
            f'<text x="14" y="{HEIGHT / 2}" transform="rotate(-90 14 {HEIGHT / 2})" text-anchor="middle">'
            f'{escape(y_label)}</text>{body}</svg>\n')


def _axes(top_value):
    plot_h = HEIGHT - BOTTOM - TOP
    parts = [f'<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{HEIGHT - BOTTOM}" stroke="black"/>',
             f'<line x1="{LEFT}" y1="{HEIGHT - BOTTOM}" x2="{WIDTH - 10}" y2="{HEIGHT - BOTTOM}" stroke="black"/>']
    for i in range(5):
        value = top_value * i / 4
        y = HEIGHT - BOTTOM - plot_h * i / 4
        parts.append(f'<line x1="{LEFT - 4}" y1="{y}" x2="{WIDTH - 10}" y2="{y}" stroke="#ddd"/>'
                     f'<text x="{LEFT - 6}" y="{y + 4}" text-anchor="end">{value:g}</text>')
    return parts, plot_h


def bars(title, labels, values, y_label, path):
    top = max(values) * 1.15
    parts, plot_h = _axes(round(top, 1))
    slot = (WIDTH - LEFT - 20) / len(values)
    for i, (label, value) in enumerate(zip(labels, values)):
        h = plot_h * value / round(top, 1)
        x = LEFT + slot * i + slot * 0.2
        parts.append(f'<rect x="{x}" y="{HEIGHT - BOTTOM - h}" width="{slot * 0.6}" height="{h}" '
                     f'fill="{COLOURS[i % len(COLOURS)]}"/>'
                     f'<text x="{x + slot * 0.3}" y="{HEIGHT - BOTTOM - h - 4}" text-anchor="middle">{value:g}</text>')
        # A label of two lines ("job\nway") fits a narrow bar.
        parts += [f'<text x="{x + slot * 0.3}" y="{HEIGHT - BOTTOM + 16 + 14 * n}" text-anchor="middle">{escape(line)}</text>'
                  for n, line in enumerate(label.split("\n"))]
    path.write_text(_svg(title, "".join(parts), y_label))


def lines(title, xs, series, y_label, x_label, path):
    top = max(max(values) for values in series.values()) * 1.15
    parts, plot_h = _axes(round(top, 1))
    span = (WIDTH - LEFT - 40) / (max(xs) - min(xs) or 1)
    for x in xs:
        px = LEFT + 10 + (x - min(xs)) * span
        parts.append(f'<text x="{px}" y="{HEIGHT - BOTTOM + 16}" text-anchor="middle">{x}</text>')
    parts.append(f'<text x="{WIDTH / 2}" y="{HEIGHT - 6}" text-anchor="middle">{escape(x_label)}</text>')
    for i, (name, values) in enumerate(series.items()):
        points = [(LEFT + 10 + (x - min(xs)) * span, HEIGHT - BOTTOM - plot_h * v / round(top, 1))
                  for x, v in zip(xs, values)]
        colour = COLOURS[i % len(COLOURS)]
        parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2" '
                     f'points="{" ".join(f"{px},{py}" for px, py in points)}"/>')
        parts += [f'<circle cx="{px}" cy="{py}" r="3" fill="{colour}"/>' for px, py in points]
        parts.append(f'<text x="{LEFT + 20}" y="{TOP + 14 + 16 * i}" fill="{colour}">{escape(name)}</text>')
    path.write_text(_svg(title, "".join(parts), y_label))


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    launch = json.loads((RESULTS / "launch_overhead.json").read_text())
    medians = launch["median_seconds"]
    ways = {"a_hand_mpirun": "DDP job\nby hand", "b_launch_yml": "DDP job\nlaunch.yml",
            "c_torchfleet_launch": "DDP job\ntorchfleet", "a_tiny_hand_mpirun": "no-op job\nby hand",
            "b_tiny_launch_yml": "no-op job\nlaunch.yml", "c_tiny_torchfleet_launch": "no-op job\ntorchfleet",
            "b_floor_playbook": "no job\nplaybook", "c_floor_runner": "no job\nrunner"}
    bars("Launch: median wall time, same job each way", [ways[key] for key in ways if key in medians],
         [medians[key] for key in ways if key in medians], "seconds", OUT / "launch_overhead.svg")
    setup = json.loads((RESULTS / "setup_cost.json").read_text())
    bars(f"setup.yml on {setup['nodes']} nodes", ["cold", "warm (changed=%d)" % setup["warm_changed_total"]],
         [setup["cold_s"], setup["warm_s"]], "seconds", OUT / "setup_cost.svg")
    scale = json.loads((RESULTS / "scale.json").read_text())
    rows = scale["rows"]
    lines("Scale: wall time by number of nodes", [r["nodes"] for r in rows],
          {"setup.yml (no Python env)": [r["setup_s"] for r in rows],
           "launch.yml (tiny script)": [r["launch_s"] for r in rows]}, "seconds", "nodes", OUT / "scale.svg")


if __name__ == "__main__":
    main()

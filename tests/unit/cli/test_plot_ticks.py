"""`fluksio plot` labels steps as the whole numbers they are."""

from __future__ import annotations

from datetime import datetime, timezone

from fluksio.cli.plot import _draw
from fluksio.schemas import RunRecord, RunStatus


def test_steps_get_integer_ticks_even_for_a_short_series() -> None:
    from matplotlib.figure import Figure  # the dev extra has it (fluksio[plot])

    run = RunRecord(id="01JPA3QY7K8ZX4W2M9N6B5C3D1", flow="train", status=RunStatus.OK,
                    created_at=datetime(2025, 3, 14, tzinfo=timezone.utc))
    figure = Figure()
    axes = figure.subplots()
    _draw(axes, "loss", [(run, [(0, 1.0), (1, 0.5), (2, 0.25)])], None, False)
    figure.canvas.draw()
    ticks = [t for t in axes.get_xticks() if axes.get_xlim()[0] <= t <= axes.get_xlim()[1]]
    assert ticks and all(float(t).is_integer() for t in ticks), ticks
    labels = [label.get_text() for label in axes.get_xticklabels() if label.get_text()]
    assert all("." not in label for label in labels), labels

"""When a benchmark's difference means something: the rule every section that compares uses.

A benchmark that compares a treatment with a control measures each several times in the same run (rounds,
repeats). Its noise is the larger relative spread, (max - min) / min, of the two variants' repeated
measurements: how far one variant moved from itself under that run's conditions. A ratio (treatment over
control) further from 1 than the noise is a difference the run shows; one within it is no difference the
run can see. With fewer than two measurements of either, the noise is unknown and the ratio says so.

A treatment that only adds work (a checkpoint, a callback, a progress bar) cannot make training faster.
Measured faster beyond the noise, or faster with no noise measured, the run is inconclusive: the machine's
load, not the treatment, set the figures, so the ratio is not reported as the treatment's cost.
"""

import statistics
from dataclasses import dataclass

HIGHER, LOWER, WITHIN, UNKNOWN, INCONCLUSIVE = "higher", "lower", "within noise", "noise unknown", "inconclusive"


def percent(fraction: float) -> str:
    """'13%', or '0.4%' below one percent (so a small noise does not print as none)."""
    return f"{fraction:.0%}" if fraction >= 0.01 or fraction == 0 else f"{fraction:.1%}"


def spread(values) -> float | None:
    """(max - min) / min of one variant's repeated measurements; None for fewer than two."""
    values = [v for v in values if v is not None]
    if len(values) < 2:
        return None
    return (max(values) - min(values)) / min(values)


@dataclass(frozen=True)
class Difference:
    ratio: float  # the treatment's figure over the control's
    noise: float | None  # the larger spread of the two; None: not measured
    verdict: str  # HIGHER, LOWER, WITHIN, UNKNOWN or INCONCLUSIVE

    @property
    def shown(self) -> bool:
        """Whether the run supports stating the ratio as the treatment's effect."""
        return self.verdict in (HIGHER, LOWER)

    def noise_words(self) -> str:
        return "noise unknown" if self.noise is None else f"noise ±{percent(self.noise)}"

    def says(self, form: str = "{:.2f}×") -> str:
        """The ratio with what the run can say of it, in one parenthesis: '1.82× (beyond this run's noise,
        ±4%)', '1.03× (within this run's noise, ±13%: no difference shown)', '0.79× (noise unknown)', or
        'inconclusive (...)' without the ratio."""
        ratio = form.format(self.ratio)
        if self.verdict in (HIGHER, LOWER):
            return f"{ratio} (beyond this run's noise, ±{percent(self.noise)})"
        if self.verdict == WITHIN:
            return f"{ratio} (within this run's noise, ±{percent(self.noise)}: no difference shown)"
        if self.verdict == UNKNOWN:
            return f"{ratio} (noise unknown)"
        return ("inconclusive (faster than the control although it only adds work, "
                + (f"beyond this run's noise, ±{percent(self.noise)})" if self.noise is not None else "with the noise unknown)"))


def judge(ratio: float, spreads, *, adds_work: bool = False) -> Difference:
    """What a run can say of `ratio` (treatment over control) given each variant's spread (None: unknown)."""
    spreads = list(spreads)
    noise = None if any(s is None for s in spreads) or not spreads else max(spreads)
    if adds_work and ratio < 1 and (noise is None or 1 - ratio > noise):
        return Difference(ratio, noise, INCONCLUSIVE)
    if noise is None:
        return Difference(ratio, noise, UNKNOWN)
    if abs(ratio - 1) <= noise:
        return Difference(ratio, noise, WITHIN)
    return Difference(ratio, noise, HIGHER if ratio > 1 else LOWER)


def compare(control, treatment, *, adds_work: bool = False, statistic=statistics.median) -> Difference:
    """`judge` for two lists of repeated measurements: the ratio of their `statistic`, their spreads."""
    return judge(statistic(treatment) / statistic(control), (spread(control), spread(treatment)),
                 adds_work=adds_work)

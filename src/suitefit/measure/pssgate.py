"""When the sampler process reads PSS: on a cadence, and where the tree's RSS is at a high.

PSS walks page tables (``smaps_rollup``): too slow to read every 0.1 s on a big tree, so it
is read within a share of the run's time (``budget``). On a cadence alone it missed the
highs that matter: RSS counts a page shared by several processes (a forked pool) once per
process, so PSS at the run's highest RSS is the figure that says what a runner's memory
limit saw there. The bundled example suite's 500 MiB hog holds its memory for under a
second; read once a second, five serial runs whose RSS peak was 576 MiB each showed a
"peak" PSS of 159-572 MiB. Pure: the watcher feeds it sample times, totals and read costs.
"""

from __future__ import annotations

HIGH_NEAR = 0.95  # a sample within 5% of the run's highest RSS is at its high
NEW_HIGH_MB = 16.0  # a high is worth a read once no read was near it and it is this far above the last
RISE = 0.01  # a sample still climbs if above the high by 1% and RISE_MB (xdist's controller grows
RISE_MB = 2.0  # ~7 KiB a test: a plateau that creeps up is a plateau)
BURST_READS = 3  # the credit holds at most this many reads' worth
BACKSTOP = 3  # a climb that never stops defers the cadence at most this many cadences


class PssGate:
    """Reads every ``every`` samples, and at highs of the tree's RSS, within an average of
    ``budget`` of the time (0 or less: no limit; ``every`` 0: never).

    A credit of reading time accrues at ``budget`` a second, up to ``BURST_READS`` reads; the
    cadence reads only with one read's worth to spare, which stays for a high. While the RSS
    climbs to a new high, nothing is read (a read on the way up spent the credit the top
    needed); the first sample that no longer rises while still near the high (a ramp's end
    is its top) reads with whatever credit is left, a debt where a read of the bigger tree
    costs more (the cadence then waits longer). A high that falls away before it is read (a
    spike: a hog test's memory, often gone within 0.1-0.3 s) waits until the RSS is near it
    again; the summary then says no PSS was read at the peak.
    """

    def __init__(self, every: int, budget: float, now: float) -> None:
        self.every = every
        self.budget = budget
        self.credit = 0.0
        self.cost = 0.0  # the last read's time
        self._t = now
        self._since = every  # samples since the last read: the first sample reads
        self.high = 0.0  # the highest RSS total so far
        self.read_at = 0.0  # the highest RSS total at which PSS was read
        self.reads = 0
        self.at_high: tuple[float, float] | None = None  # (RSS, PSS) of the read at the highest RSS

    def due(self, now: float, total: float) -> bool:
        """Should the sample taken at ``now``, of ``total`` MiB RSS, read PSS too?"""
        if self.every <= 0:
            return False
        if self.budget > 0 and self.cost > 0:  # before the first read, nothing to spare it for
            self.credit = min(self.credit + (now - self._t) * self.budget, BURST_READS * self.cost)
        self._t = now
        rising = total > self.high * (1 + RISE) + RISE_MB
        self.high = max(self.high, total)
        unlimited = self.budget <= 0
        if self.read_at < HIGH_NEAR * self.high and self.high > self.read_at + NEW_HIGH_MB:  # a high not read yet
            if not rising and total >= HIGH_NEAR * self.high and (unlimited or self.credit > 0):
                return True  # a ramp's top, or the tree back near a high: with what credit is left
            if rising and self.reads and self._since < BACKSTOP * self.every:
                self._since += 1  # still climbing: the read waits for the top (the first sample reads)
                return False
        if self._since >= self.every and (unlimited or self.credit >= 2 * self.cost):
            return True
        self._since += 1
        return False

    def read(self, took: float, total: float, pss: float | None) -> None:
        """The read the last ``due`` asked for took ``took`` seconds and gave ``pss`` MiB."""
        self.reads += 1
        self._since = 1
        self.cost = took
        if self.budget > 0:  # the first read opens the credit at one read's worth: the reserve, from the start
            self.credit = took if self.reads == 1 else self.credit - took
        # PSS never exceeds RSS at one instant: a PSS above the total read before it says the
        # tree had grown by then (a read takes milliseconds while a hog allocates)
        level = max(total, pss or 0.0)
        if level >= self.read_at:
            self.read_at = level
            if pss is not None:
                self.at_high = (level, pss)

    def pss_at_peak(self, peak_rss: float) -> tuple[float, float] | None:
        """(RSS, PSS) of the read at (within 5% of) the run's highest sampled RSS ``peak_rss``, if
        one was. The run's peak may be higher still (a worker's exact VmHWM): ``at_peak``."""
        if self.at_high is None or self.at_high[0] < HIGH_NEAR * peak_rss:
            return None
        return self.at_high


def at_peak(read: tuple[float, float] | None, peak_rss: float) -> float | None:
    """The PSS of ``read`` (RSS, PSS) if it was read at (within 5% of) ``peak_rss``."""
    return read[1] if read is not None and read[0] >= HIGH_NEAR * peak_rss else None

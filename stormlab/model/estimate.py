"""A second check on the physics the lab and the reference model share, by another method (pure):
closed-form processor-sharing estimates instead of a simulation, written from the profile's
numbers alone. Where it and the model disagree the sweep says so; neither is taken on trust.

With ``C`` cores shared by ``N`` requests in flight (each at most one core), a request of work
``w`` core-seconds finishes in about ``w * N / C`` seconds; it makes the allowance ``A`` while
``N < C * A / w``. Three thresholds follow, for the cell that serves the blipped racks:

- **The herd.** A blip long enough for a rack to see its link down makes the rack's nodes renew
  when it heals, but not all at once: a network that heals resets nothing, so a node whose slot
  came during the blip has an attempt hanging on the cut and renews only when it gives that up,
  within an allowance; the others (a share ``1 - blip / period``) renew the instant the rack sees
  its link up. With ``H`` herd nodes, those at once and those that arrive within the allowance
  (staying half of it on average, as the background's), and the background ``B`` (what is in
  flight at the baseline, by Little's law, plus the other nodes' renewals that arrive within one
  allowance), the herd's small memberships miss when ``w_small * (H + B) / C >= A``. They retry at
  once, and every node that renews from then on finds the service as full: **collapse** (every
  node disqualified, 100%).
- **The stuck bigs.** Otherwise the smalls get through, and the big memberships of the herd (and
  those of the other nodes renewing while the herd drains, ``K0``) miss if
  ``w_big * (H + B) / C >= A``. Each retries at once, holding a request in flight; with ``K``
  bigs retrying and the smalls' load ``rho = rate_small * w_small / C``, about
  ``N = K / (1 - rho)`` are in flight, and the bigs hold the service on their own while
  ``w_big * N / C >= A``. If ``K0`` bigs are enough, every big that renews after them misses too:
  the **plateau** (the bigs' share of the traffic); otherwise they drain: **recovered**.
- **The plateau's own floor.** With every big retrying, the smalls must still fit:
  ``w_small * N / C < A``, else the plateau itself collapses.

It holds for the 2015 retry policy (immediate, no budget) and no admission control, and only
judges what these formulas say: the blip's phase, the jitter and the probe timing are the model's.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from metadata_service.admission import membership_work_s
from metadata_service.membership import MembershipStore
from stormcore.fleet import cell_cores, cell_of, rack_of
from stormcore.settings import LabSettings

COLLAPSE, PLATEAU, RECOVERED = "collapse", "plateau", "recovered"
# the other nodes' renewals that arrive within the herd's first allowance stay, as the service is
# slow, until its end: half an allowance each on average
ARRIVING = 0.5


@dataclass(frozen=True)
class Estimate:
    outcome: str  # collapse, plateau, recovered
    level: float  # the customers' error it predicts
    herd: int  # nodes that renew at once when the link heals
    herd_limit: float  # the herd (with the background) at which the smalls miss
    bigs_limit: float  # the bigs retrying that keep every big failing


def applies(s: LabSettings) -> str | None:
    """Why the formulas do not apply to these settings (None: they do)."""
    if s.retry_policy != "immediate":
        return f"retry policy {s.retry_policy}: its delays are not in the formulas"
    if s.admission_limit or s.admission_deadline:
        return "admission control turns requests away: not in the formulas"
    if s.abandoned_work != "cancel":
        return "abandoned work keeps running: not in the formulas"
    return None


@functools.lru_cache(maxsize=32)
def fleet_entries(s: LabSettings) -> tuple[tuple[str, int], ...]:
    """Each node's membership size on the fleet of ``s``. Placing a 1,000-node fleet's tables
    takes ~70 ms and a sweep asks for the same few fleets hundreds of times, so it is kept."""
    store = MembershipStore.for_fleet(s)
    return tuple((n, store.entries(n)) for n in store.nodes)


def estimate(s: LabSettings, blip_racks: int, blip_s: float) -> Estimate | None:
    """The level a blip of racks ``0 .. blip_racks-1`` for ``blip_s`` leaves (profile seconds),
    as the fleet's customers see it (a cell's collapse is that cell's share of the traffic)."""
    if applies(s) is not None:
        return None
    fleet = fleet_entries(s)
    cell = cell_of(0, s)
    entries = {n: e for n, e in fleet if cell_of(rack_of(n), s) == cell}
    traffic = sum(e for _, e in fleet)  # customers spread uniformly over partitions
    small_size, big_size = min(entries.values()), max(entries.values())
    bigs = {n for n, e in entries.items() if e == big_size > small_size}
    small_w, big_w = membership_work_s(s, small_size), membership_work_s(s, big_size)
    cores, allowance, period = cell_cores(cell, s), s.allowance_s, s.renewal_period_s
    # a rack renews all at once only if its probes saw the link down: two failures, each a timeout
    seen_down = blip_s >= s.probe_failures * s.probe_timeout_s
    herd = {n for n in entries if rack_of(n) < blip_racks} if seen_down else set()
    baseline = sum(membership_work_s(s, e) for e in entries.values()) / period  # in flight, Little's law
    background = baseline + (len(entries) - len(herd)) / period * allowance * ARRIVING
    herd_limit = cores * allowance / small_w - background
    bigs_limit = cores * allowance / big_w
    at_once = max(0.0, 1.0 - blip_s / period)  # the herd's share whose slot did not come during the blip
    in_flight = len(herd) * (at_once + (1.0 - at_once) * ARRIVING)  # the rest give up their hanging attempts within an allowance
    found = Estimate(RECOVERED, 0.0, len(herd), herd_limit, bigs_limit)
    if herd and in_flight >= herd_limit:
        return Estimate(COLLAPSE, sum(entries.values()) / traffic, *_limits(found))
    # the smalls in flight alongside K bigs: N = K + rate_small * (w_small * N / C) when N > C
    load = (len(entries) - len(bigs)) / period * small_w / cores
    if load >= 1:
        return Estimate(COLLAPSE, sum(entries.values()) / traffic, *_limits(found))
    drain = small_w * (in_flight + background) / cores  # how long the herd's smalls keep the service full
    if big_w * (in_flight + background) / cores < allowance:
        return found  # the herd's bigs got through too
    first_bigs = len(herd & bigs) + len(bigs - herd) / period * (drain + allowance)
    if first_bigs / (1 - load) < bigs_limit:
        return found  # too few bigs missed to hold the service: they drain
    if small_w * (len(bigs) / (1 - load)) / cores >= allowance:
        return Estimate(COLLAPSE, sum(entries.values()) / traffic, *_limits(found))
    return Estimate(PLATEAU, sum(entries[n] for n in bigs) / traffic, *_limits(found))


def _limits(e: Estimate) -> tuple[int, float, float]:
    return e.herd, e.herd_limit, e.bigs_limit

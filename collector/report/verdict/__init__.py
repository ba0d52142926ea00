"""What limited a run: every resource's utilisation per step, and the verdict (pure).

The same figures as the "what limits it" recording rules (alerts/wattbit-recording.yml,
docs/rules.md), computed from what gathering read (:class:`~..series.VerdictData`, beside the
report's own tracks) so that a report works on data backfilled into a Prometheus without the
rules. One module per resource — :mod:`.disk`, :mod:`.controller`, :mod:`.pcie`, :mod:`.nic`,
:mod:`.cpu`, :mod:`.tcp` — each its utilisation and its words in the evidence;
:mod:`.resources` puts them together per step and host, :mod:`.choice` chooses among them over a
set of steps (the whole run, a phase). Everything is keyed per host.
"""

from .choice import left_out, verdict
from .resources import Usage, usage

__all__ = ["Usage", "left_out", "usage", "verdict"]

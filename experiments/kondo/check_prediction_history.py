"""How much of claim 4's prediction error comes from EXCL-PRED's rate r being measured over the sweep's day of
history (16 h of it off-hours, when more hosts are up and idle) rather than over business hours alone?

EXCL-PRED with 100 and 200 tasks of 15 min on the seed-1 sdsc platform at 8 afternoon start points, with a day of
history and with 3 hours of it (business hours only, as the start points are after noon):

    MGST_PURE=1 python experiments/kondo/check_prediction_history.py /tmp/kondo-sdsc
"""

import statistics
import sys
from pathlib import Path

from mgst.papers.kondo.experiment import kondo_experiment
from mgst.papers.kondo.metrics import simulate_run
from mgst.sim.loop import Simulation
from mgst.traces.calendar import business_starts
from mgst.traces.platform import generate_platform, write_platform

DAY = 86400.0
folder = Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/kondo-sdsc")
if not (folder / "hosts.csv").exists():
    write_platform(generate_platform("sdsc", hosts=220, days=28, seed=1), folder)
starts = [s for s in business_starts(28 * DAY, 60, 1, margin=DAY) if s >= DAY and s % DAY >= 12 * 3600][:8]
for tasks in (100, 200):
    for history in (DAY, 3 * 3600.0):
        errors, rates = [], []
        for start in starts:
            exp = kondo_experiment(folder, "EXCL-PRED", tasks, 15, start, history=history)
            sim = Simulation(exp)
            sim.run()
            rates.append(sim.policy.report()["predicted_rate"])
            errors.append(simulate_run(exp).prediction_error)
        print(f"T = {tasks}, history {history / 3600:.0f} h: mean r {statistics.mean(rates):.3f}, "
              f"mean prediction error {100 * statistics.mean(errors):.1f} % ({len(starts)} start points)")

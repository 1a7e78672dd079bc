"""Regenerate ``pymc_dp/step_methods/_tables/logistic_correction.json``: the Barker test's V_cor tables.

Fits V_cor for each C by the sup-norm linear programme of
:func:`pymc_dp.step_methods.barker_correction.fit_logistic_correction` and records, beside each table,
its exact sup CDF error and its variance (which the fit makes π²/3 − C).

    python scripts/fit_logistic_correction.py            # about a minute
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from pymc_dp.step_methods.barker_correction import LOGISTIC_VARIANCE, fit_logistic_correction

DEFAULT_VARIANCES = (0.5, 1.0, 1.5, 2.0, 2.5, 3.0)
OUTPUT = Path(__file__).resolve().parents[1] / "pymc_dp" / "step_methods" / "_tables" / "logistic_correction.json"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variances", type=float, nargs="+", default=list(DEFAULT_VARIANCES))
    parser.add_argument("--output", type=Path, default=OUTPUT)
    args = parser.parse_args()
    tables = []
    print(f"{'C':>5} {'components':>10} {'sup |F - logistic|':>19} {'Var(V_cor)':>11} {'pi^2/3 - C':>11} {'fit s':>6}")
    for c in args.variances:
        start = time.perf_counter()
        fit = fit_logistic_correction(c)
        seconds = time.perf_counter() - start
        entry = fit.to_dict() | {"sup_error": fit.sup_error, "variance": fit.variance}
        tables.append(entry)
        print(
            f"{c:5.2f} {len(fit.weights):10d} {fit.sup_error:19.3e} {fit.variance:11.6f} "
            f"{LOGISTIC_VARIANCE - c:11.6f} {seconds:6.1f}"
        )
    document = {
        "format": 1,
        "description": "V_cor with N(0, C) + V_cor ~ Logistic(0, 1); each component is "
        "0.5 N(m, s^2) + 0.5 N(-m, s^2) with weight w.",
        "generated_by": "scripts/fit_logistic_correction.py",
        "tables": tables,
    }
    args.output.write_text(json.dumps(document, indent=1) + "\n")
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()

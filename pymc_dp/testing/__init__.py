"""Tools for testing pymc-dp itself: empirical privacy audits (:mod:`pymc_dp.testing.audit`)."""

"""How long one engine step lasts: the one model every replay is timed by, and where its numbers come from.

``model`` is the step-time interface (the batch a step holds; the fixed and the linear forms) and
``steptime.h`` its C twin, evaluated in the same float64 order; ``physics`` is the roofline with
fitted coefficients (``steptime_fit.json``), ``hardware`` the card figures it reads, ``measured``
aiconfigurator-core's kernel data fitted to the same form, ``nnls`` the fits' solver. Nothing here
knows an engine or a workload: the serving layer picks the source for a deployment.
"""

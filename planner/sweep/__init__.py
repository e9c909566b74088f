"""Search deployments for the cheapest one that serves a workload.

``spec`` parses the sweep spec, ``evaluate`` scores one point and ranks the results,
``executors`` runs the points locally or on Ray.
"""

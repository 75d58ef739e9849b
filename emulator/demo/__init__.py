"""The local demo: the scavenger queue, measured against no checkpointing (issue 7).

``trace`` makes the seeded arrivals, ``timeline`` is what a run observed, ``metrics`` turns a
timeline into the report's numbers (pure), ``report`` prints the table and draws the chart.
"""

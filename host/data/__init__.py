"""Host (CPython): Data: CSV tables (tabular) and the time-series archive's .ts files
(timeseries), and the vendored copies of both.
"""

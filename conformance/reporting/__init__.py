"""Reports: ``report.json``, ``report.html``, ``repro_test.py`` and the console rendering.
"""

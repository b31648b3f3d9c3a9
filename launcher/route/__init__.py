"""The run route: settings checked, the run directory made (or resumed), a backend starts and waits, the end reported."""

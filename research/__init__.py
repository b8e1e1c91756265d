"""The studies behind the results: one folder per study, each with its driver, README, results and tests."""

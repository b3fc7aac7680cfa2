"""Package layout (everything else is in pyproject.toml).

The repository keeps the role services in ``services/`` (one room per role), but they install under the import name
``mpdp_services`` so that mpdp never puts a generic top-level package such as ``services`` into a shared environment.
"""

from setuptools import find_packages, setup

core = find_packages(include=["mpdp", "mpdp.*"])
roles = ["mpdp_services" + name[len("services"):] for name in find_packages(include=["services", "services.*"])]
setup(packages=core + roles, package_dir={"mpdp_services": "services"})

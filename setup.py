"""Build step: ship the labelling configs inside the wheel (everything else is in pyproject.toml).

The configs live once, at the repository's top (``label_config/<task>.xml``: the single source of
the label sets, read by the service, the tests and the docs). Package data can only come from a
package's own folder, so ``build_py`` copies them into the built package as
``dynaval/label_config/``, where an installed service looks for them
(``Settings.resolved_label_config_dir``). A build that finds none fails, rather than make a wheel
that cannot create a round.
"""

from __future__ import annotations

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.errors import FileError

LABEL_CONFIG_DIR = "label_config"
PACKAGED_AS = ("dynaval", "label_config")


class BuildPyWithLabelConfigs(build_py):
    def _label_configs(self) -> dict[str, str]:
        """Each config's place in the built package, and its source."""
        # PEP 517 backends build in the source tree's root (also an unpacked sdist's: MANIFEST.in
        # puts the folder in it), so the relative path is the top folder.
        configs = sorted(Path(LABEL_CONFIG_DIR).glob("*.xml"))
        if not configs:
            raise FileError(f"no labelling configs in {Path(LABEL_CONFIG_DIR).resolve()}/*.xml")
        return {str(Path(self.build_lib, *PACKAGED_AS, c.name)): str(c) for c in configs}

    def run(self) -> None:
        super().run()
        if self.editable_mode:  # an editable install builds nothing: the service reads the top folder
            return
        for built, source in self._label_configs().items():
            self.mkpath(str(Path(built).parent))
            self.copy_file(source, built)

    def get_output_mapping(self) -> dict[str, str]:
        return {**super().get_output_mapping(), **self._label_configs()}

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        if self.editable_mode:  # there build_py lists its outputs from get_output_mapping
            return super().get_outputs(include_bytecode)
        return [*super().get_outputs(include_bytecode), *self._label_configs()]


setup(cmdclass={"build_py": BuildPyWithLabelConfigs})

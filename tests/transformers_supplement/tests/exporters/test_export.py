"""Stands in for tests/exporters/test_export.py, which the sdist lacks (test_modeling_common.py imports
`ExportTesterMixin` from it, and `ModelTesterMixin` inherits it).

It makes the check of the repository's `ExportTesterMixin.test_torch_export`: every class of `all_model_classes`,
built from the model tester's config and inputs, is exported by the installed transformers' `DynamoExporter`
(`torch.export.export` underneath), with static and with dynamic shapes, and the exported program's outputs must
match eager's. Two differences, both stricter: it is not marked slow, so it runs in every test run, and every
output tensor must match within 1e-5, where the original allows 1e-4 and 5% of the elements off. The ONNX,
OpenVINO and ExecuTorch variants of the original need packages this project does not install; they are left out.
"""

import copy

import torch
from packaging import version
from parameterized import parameterized
from transformers import set_seed
from transformers.exporters.configs import DynamoConfig
from transformers.exporters.exporter_dynamo import DynamoExporter
from transformers.exporters.utils import get_leaf_tensors
from transformers.testing_utils import torch_device


class ExportTesterMixin:
    """Expects the host class to provide `all_model_classes`, `model_tester`, `test_torch_exportable` and
    `_prepare_for_class`, as `ModelTesterMixin` does."""

    @parameterized.expand([("static", False), ("dynamic", True)])
    def test_torch_export(self, _, dynamic, atol=1e-5, rtol=1e-5):
        if not self.test_torch_exportable:
            self.skipTest(reason="Model architecture is not exportable")
        needed = DynamoExporter.min_versions["torch"]  # (an older torch: `make test-floors`)
        if version.parse(torch.__version__).release < version.parse(needed).release:
            self.skipTest(reason=f"transformers' DynamoExporter needs torch {needed}, and this is {torch.__version__}")
        exporter = DynamoExporter()
        for model_class in self.all_model_classes:
            config, inputs = self.model_tester.prepare_config_and_inputs_for_common()
            inputs = {k: v for k, v in self._prepare_for_class(inputs, model_class).items() if v is not None}
            inputs.pop("labels", None)
            model = model_class(config).eval().to(torch_device)
            with torch.no_grad():
                set_seed(1234)
                expected = get_leaf_tensors(model(**copy.deepcopy(inputs)))
            with self.subTest(model_class.__name__):
                exported = exporter.export(model, inputs, config=DynamoConfig(dynamic=dynamic))
                with torch.no_grad():
                    set_seed(1234)
                    actual = get_leaf_tensors(exported.program.module()(**copy.deepcopy(inputs)))
                self.assertTrue(actual, f"the exported {model_class.__name__} returned no tensors")
                torch.testing.assert_close(actual, expected, atol=atol, rtol=rtol)

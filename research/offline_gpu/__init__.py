# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.

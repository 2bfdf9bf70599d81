"""A plugin: processing steps this project needs and batchloaders does not ship."""
import tensorflow as tf

import batchloaders


@batchloaders.register_step("lowercase", schema={"type": "object", "additionalProperties": False, "properties": {}})
def lowercase(x):
    """ASCII codes A-Z become a-z; every other code is kept."""
    return tf.where((x >= ord("A")) & (x <= ord("Z")), x + (ord("a") - ord("A")), x)

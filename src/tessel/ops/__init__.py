"""One definition per op: what every stage needs to know about an IR op, and the NPU step
emitters (mapping candidates, constants, instructions) of the integer ops."""

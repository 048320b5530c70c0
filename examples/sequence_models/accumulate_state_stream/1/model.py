"""accumulate_state, decoupled: the model answers through its response sender, here from a
thread after execute has returned. The response that carries SUM_OUT sets the state; the
server holds the sequence's next request until the final response has been sent."""

import threading

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            value = pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy()
            total = pb_utils.get_input_tensor_by_name(request, "SUM_IN").as_numpy() + value
            sender = request.get_response_sender()
            threading.Thread(target=self.answer, args=(sender, total)).start()
        return None

    def answer(self, sender, total):
        outputs = [pb_utils.Tensor("OUTPUT", total), pb_utils.Tensor("SUM_OUT", total)]
        sender.send(pb_utils.InferenceResponse(outputs))
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

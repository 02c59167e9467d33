# bloomery: a pytest plugin for llama.cpp's server test suite (tools/server/tests, fetched at test
# time by scripts/llama-server-tests.ts; nothing of the suite is kept in this repository). It points
# every server preset at one local model (LLAMA_SERVER_TEST_MODEL: the demo GGUF) instead of the
# Hugging Face downloads the suite asks for (no network here), and skips the session's warm-up
# download of every preset. The server under test is LLAMA_SERVER_BIN_PATH, as the suite reads it.
import os



def _pointed(make):
    def preset():
        server = make()
        server.model_file = os.environ["LLAMA_SERVER_TEST_MODEL"]
        server.model_hf_repo = None
        server.model_hf_file = None
        server.model_url = None
        server.offline = True
        return server

    return staticmethod(preset)


def pytest_configure(config):
    import utils  # the suite's module (its directory is the rootdir)

    presets = utils.ServerPreset
    for name, value in list(vars(presets).items()):
        if name == "load_all" or not isinstance(value, staticmethod):
            continue
        setattr(presets, name, _pointed(value.__func__))
    presets.load_all = staticmethod(lambda: None)



# bloomery: Homebrew formula template. scripts/release-formula.ts fills in the version, the
# release URL and each archive's sha256 from SHA256SUMS and writes the formula for the tap.
class Bloomery < Formula
  desc "MoE LLM inference server for models larger than the GPU; a drop-in llama-server"
  homepage "https://github.com/bloomery/bloomery"
  version "@VERSION@"

  on_macos do
    depends_on arch: :arm64 # Metal build for Apple silicon only
    url "@URL@/bloomery-@VERSION@-darwin-arm64.tar.gz"
    sha256 "@SHA256:darwin-arm64@"
  end

  on_linux do
    on_intel do
      # the CUDA build also runs without a card (it then serves on the CPU)
      url "@URL@/bloomery-@VERSION@-linux-x64-cuda.tar.gz"
      sha256 "@SHA256:linux-x64-cuda@"
    end
    on_arm do
      # the aarch64 CPU build (NEON, dotprod, i8mm chosen at run time); a GB10 wants the
      # linux-arm64-cuda archive from install.sh, which is not built yet (docs/arm64.md)
      url "@URL@/bloomery-@VERSION@-linux-arm64.tar.gz"
      sha256 "@SHA256:linux-arm64@"
    end
  end

  def install
    if OS.mac?
      bin.install "bloomery-serve-metal"
    else
      bin.install "bloomery-serve"
    end
  end

  def caveats
    exe = OS.mac? ? "bloomery-serve-metal" : "bloomery-serve"
    <<~EOS
      Serve the built-in demo model (no download needed):
        #{exe} --demo
      or a GGUF from Hugging Face:
        #{exe} -hf unsloth/Qwen3-30B-A3B-Instruct-2507-GGUF:Q4_K_M
    EOS
  end

  test do
    exe = bin/(OS.mac? ? "bloomery-serve-metal" : "bloomery-serve")
    assert_match version.to_s, shell_output("#{exe} --version")

    # a small synthetic model, served end to end on a free port
    model = testpath/"smoke.gguf"
    system exe, "synth", "test-moe-wide:Q4_K_M", "-o", model
    assert_path_exists model
    port = free_port
    pid = spawn exe.to_s, "-m", model.to_s, "--host", "127.0.0.1", "--port", port.to_s
    begin
      health = ""
      60.times do
        health = shell_output("curl -s http://127.0.0.1:#{port}/health || true")
        break if health.include?("ok")

        sleep 1
      end
      assert_match "\"status\":\"ok\"", health
    ensure
      Process.kill("TERM", pid)
      Process.wait(pid)
    end
  end
end

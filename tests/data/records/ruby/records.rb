# Errors for tracehound's corpus of real error records, printed by Ruby itself and its Logger:
# run by ../generate.py as `ruby -I lib records.rb <record> <case>`. Frames the tests expect
# are marked "frame:" on their line.
require "logger"
require "shop/checkout"

$stderr.write("=== tracehound-record #{ARGV[0]} ===\n")
$stderr.flush
checkout = Shop::Checkout.new
case ARGV[1]
when "nil"
  checkout.total(nil) # frame: <main>
when "cause"
  checkout.place("4x2") # frame: <main>
when "logger"
  logger = Logger.new($stderr) # the default format: "E, [time #pid] ERROR -- : msg (Class)"
  begin
    checkout.place("4x2") # frame: <main>
  rescue Shop::CheckoutError => e
    logger.error(e)
  end
  $stderr.write("=== tracehound-record ruby--logger-info ===\n")
  logger.info("checkout service started")
end

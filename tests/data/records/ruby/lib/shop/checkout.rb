module Shop
  class CheckoutError < StandardError; end

  class Checkout
    def total(order)
      order.lines.sum(&:amount) # frame: total
    end

    def place(quantity) # frame: place
      Integer(quantity) # frame: place, Integer
    rescue ArgumentError
      raise CheckoutError, "could not parse quantity #{quantity.inspect}" # frame: place
    end
  end
end
